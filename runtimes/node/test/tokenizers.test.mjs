// node --test runtimes/node/test/
// The "hf" tokenizer (text/tokenizer.mjs): the family's template, language codes, clean-up and errors,
// with the Python runtime's rules (tfm_export/text/hf.py, languages.py) and messages. No export is
// needed: TOKENIZER_JSON is a tiny Unigram tokenizer.json; its ids were checked with the Python
// `tokenizers` library. tests/test_runtimes_families.py compares real tokenizer.json files of nine
// model families with Python, token for token.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cleanUpSpaces, languageCodes, languageOptions, makeLanguages, makeTokenizer, tokenizerFiles } from '../text/tokenizer.mjs';

const added = (id, content) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
const METASPACE = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true };
const TOKENIZER_JSON = {
  version: '1.0', truncation: null, padding: null, normalizer: null, post_processor: null,
  added_tokens: [added(0, '<pad>'), added(1, '</s>'), added(2, '<unk>'), added(10, 'de_DE'), added(11, 'en_XX')],
  pre_tokenizer: METASPACE,
  decoder: METASPACE,
  model: { type: 'Unigram', unk_id: 2, byte_fallback: false, vocab: [['<pad>', 0], ['</s>', 0], ['<unk>', 0],
    ['\u2581hello', -1], ['\u2581world', -1], ['\u2581.', -2], ['\u2581it', -1], ["'s", -2], ['\u2581', -3],
    ['\u2581,', -2], ['de_DE', 0], ['en_XX', 0]] },
};
const FILES = { 'tokenizer.json': TOKENIZER_JSON };
const LANGUAGES = { source: { en_XX: 'en_XX', de_DE: 'de_DE' }, target: { en_XX: 'en_XX', de_DE: 'de_DE' },
  source_default: 'en_XX', target_on_source: false, pair: null };
const MBART50 = { type: 'hf', file: 'tokenizer.json', source_prefix: ['{lang}'], source_suffix: ['</s>'],
  clean_up_spaces: false, languages: LANGUAGES };
const T5 = { type: 'hf', file: 'tokenizer.json', source_prefix: [], source_suffix: ['</s>'], clean_up_spaces: false,
  languages: { source: {}, target: {}, source_default: null, target_on_source: false, pair: null } };

describe('the hf tokenizer (no export needed)', () => {
  test('the family template wraps the ids: {lang} is the source language token, default or chosen', () => {
    const tok = makeTokenizer(MBART50, FILES);
    assert.equal(tok.kind, 'hf');
    assert.deepEqual(tok.encode('hello world'), [11, 3, 4, 1]); // en_XX (the default) hello world </s>
    assert.deepEqual(tok.encode('hello world', 'de_DE'), [10, 3, 4, 1]);
    assert.deepEqual(tok.encode('hello', ''), [11, 3, 1]); // '' is no code (Python's `code or default`)
    const cc25 = makeTokenizer({ ...MBART50, source_prefix: [], source_suffix: ['</s>', '{lang}'] }, FILES);
    assert.deepEqual(cc25.encode('hello', 'de_DE'), [3, 1, 10]); // mbart-large-cc25: X </s> [src_lang]
    assert.deepEqual(makeTokenizer(T5, FILES).encode("it's hello"), [6, 7, 3, 1]); // T5: X </s>
    assert.deepEqual(makeTokenizer({ ...T5, source_suffix: [] }, FILES).encode('xyz hello'), [8, 2, 3]); // unknown -> <unk>
  });

  test('{lang} is dropped when no language applies; the post-processor of tokenizer.json is not used', () => {
    const noDefault = makeTokenizer({ ...MBART50, languages: { ...LANGUAGES, source_default: null } }, FILES);
    assert.deepEqual(noDefault.encode('hello'), [3, 1]);
    const noLanguages = makeTokenizer({ ...MBART50, languages: undefined }, FILES);
    assert.deepEqual(noLanguages.encode('hello'), [3, 1]);
    const withPost = { ...TOKENIZER_JSON, post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '</s>', type_id: 0 } },
      { Sequence: { id: 'A', type_id: 0 } }], pair: [], special_tokens: { '</s>': { id: '</s>', ids: [1], tokens: ['</s>'] } } } };
    assert.deepEqual(makeTokenizer(T5, { 'tokenizer.json': withPost }).encode('hello'), [3, 1]);
  });

  test('forcedBos: the target language token\'s id; none without a code', () => {
    const tok = makeTokenizer(MBART50, FILES);
    assert.equal(tok.forcedBos('de_DE'), 10);
    assert.equal(tok.forcedBos(null), null);
    assert.equal(tok.forcedBos(undefined), null);
    assert.deepEqual(languageOptions(tok, 'en_XX'), { forcedBosTokenId: 11 });
    assert.deepEqual(languageOptions(tok, undefined), {});
    assert.deepEqual(languageOptions(makeTokenizer(T5, FILES), undefined), {});
    assert.throws(() => languageOptions(null, 'de_DE'), /^Error: target language 'de_DE' needs a tokenizer; this export has none$/);
  });

  test('unknown codes name the valid ones, as Python\'s Languages', () => {
    const tok = makeTokenizer(MBART50, FILES);
    assert.throws(() => tok.encode('hello', 'fr_XX'), /^Error: unknown source language 'fr_XX'; this model knows de_DE, en_XX$/);
    assert.throws(() => tok.forcedBos('xx'), /^Error: unknown target language 'xx'; this model knows de_DE, en_XX$/);
    assert.throws(() => tok.encode('hello', 'toString'), /unknown source language 'toString'/); // not the prototype's
    const many = Object.fromEntries(Array.from({ length: 45 }, (_, i) => [`l${String(i).padStart(2, '0')}`, 'en_XX']));
    const big = makeLanguages({ source: many, target: many });
    assert.throws(() => big.targetToken('zz'), (err) => err.message.endsWith('l38, l39, ...') && err.message.includes('l00, l01'));
  });

  test('a model without language tokens takes no code, or its single pair\'s', () => {
    const t5 = makeTokenizer(T5, FILES);
    assert.throws(() => t5.encode('hello', 'en'),
      /^Error: source language 'en' does not apply: this model takes no language codes \(it translates one pair\)$/);
    assert.throws(() => t5.forcedBos('de'), /^Error: target language 'de' does not apply/);
    const pair = makeTokenizer({ ...T5, languages: { pair: ['en', 'de'] } }, FILES);
    assert.deepEqual(pair.encode('hello', 'en'), [3, 1]);
    assert.equal(pair.forcedBos('de'), null);
    assert.throws(() => pair.encode('hello', 'fr'), /^Error: source language 'fr' does not apply: this model takes only 'en'$/);
    assert.throws(() => pair.forcedBos('en'), /target language 'en' does not apply: this model takes only 'de'/);
    assert.deepEqual(languageCodes({ ...T5, languages: { pair: ['en', 'de'] } }), { source: ['en'], target: ['de'], sourceDefault: null });
    assert.deepEqual(languageCodes(MBART50), { source: ['de_DE', 'en_XX'], target: ['de_DE', 'en_XX'], sourceDefault: 'en_XX' });
    assert.deepEqual(languageCodes(null), { source: [], target: [], sourceDefault: null });
  });

  test('decode skips special tokens and ids outside the vocabulary; clean-up when the manifest asks', () => {
    const tok = makeTokenizer(MBART50, FILES);
    assert.equal(tok.decode([11, 6, 7, 3, 9, 4, 5, 1]), "it's hello , world .");
    assert.equal(tok.decode([3, 99, 4, 0]), 'hello world'); // 99: not a token (the Rust library drops it too)
    assert.equal(tok.decode([]), '');
    assert.equal(tok.decode([1, 0]), '');
    const clean = makeTokenizer({ ...MBART50, clean_up_spaces: true }, FILES);
    assert.equal(clean.decode([6, 7, 3, 9, 4, 5]), "it's hello, world.");
    assert.equal(cleanUpSpaces("a . b ? c ! d , e ' f it 's I 'm we 've they 're don 't won n't"),
      "a. b? c! d, e'f it's I'm we've they're don 't wonn't");
  });

  test('missing tokens, a missing or unreadable tokenizer.json are one-line errors', () => {
    assert.throws(() => makeTokenizer({ ...T5, source_prefix: ['<s>'] }, FILES),
      /^Error: tokenizer\.json has no token '<s>'; the folder mixes two models$/);
    assert.throws(() => makeTokenizer({ ...MBART50, languages: { source: { fr_XX: 'fr_XX' } } }, FILES), /has no token 'fr_XX'/);
    assert.throws(() => makeTokenizer(MBART50), /^Error: tokenizer\.json was not given to the tokenizer; read it from the export folder/);
    assert.throws(() => makeTokenizer(MBART50, { 'tokenizer.json': { model: { type: 'Nope' } } }),
      /^Error: tokenizer\.json is not a tokenizer\.json this runtime can read \(.+\); re-export the model$/);
    assert.deepEqual(tokenizerFiles(MBART50), ['tokenizer.json']);
    assert.deepEqual(tokenizerFiles({ ...MBART50, file: 'other.json' }), ['other.json']);
    assert.deepEqual(tokenizerFiles({ type: 'chars' }), []);
  });
});

describe('other tokenizer types (no export needed)', () => {
  test('marian exports made before source.tokenizer.json, and m2m100, are ids only: text is refused in one line', () => {
    const marian = makeTokenizer({ type: 'marian', languages: { target: { de: '>>de<<' }, target_on_source: true } });
    assert.equal(marian.idsOnly, true);
    assert.deepEqual(marian.languages.codes('target'), ['de']);
    assert.deepEqual(tokenizerFiles({ type: 'marian' }), []);
    const old = /^Error: this "marian" export has no source\.tokenizer\.json \(exported before .*\); re-export it with this version, pass token ids/;
    assert.throws(() => marian.encode('Hello'), old);
    assert.throws(() => marian.decode([3]), old);
    const m2m100 = makeTokenizer({ type: 'm2m100' });
    assert.throws(() => m2m100.encode('Hello'),
      /^Error: tokenizer type "m2m100" is not supported by this runtime \(only "chars", "hf", "marian"\); pass token ids/);
  });

  test('chars takes no language codes', () => {
    const chars = makeTokenizer({ type: 'chars', src_vocab: ['<pad>', '<bos>', '<eos>', '1'], tgt_vocab: ['<pad>', '<bos>', '<eos>', 'a'] });
    assert.deepEqual(chars.encode('1', undefined, null), [3, 2]);
    assert.equal(chars.forcedBos('de'), null); // Python's CharTokenizer.forced_bos: None
    assert.throws(() => chars.encode('1', 'en'), /source language 'en' does not apply: this model takes no language codes/);
    assert.throws(() => chars.encode('1', undefined, 'de'), /target language 'de' does not apply/);
  });
});
