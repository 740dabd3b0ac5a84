// The tokenizers of the manifest's `tokenizer` section: text <-> ids, and the language codes of
// multilingual models. The rules are the Python runtime's (tfm_export/text/tokenizer.py, hf.py,
// languages.py), so Node, the browser and Python encode and decode to the same ids and texts.
//
//   "chars"  one id per character, the vocabularies inside the manifest
//   "hf"     the export's tokenizer.json through @huggingface/tokenizers (the JS port of Hugging
//            Face's `tokenizers`), wrapped in the family's source template and language tokens
//   "marian" SentencePiece files, as the export writes them for this runtime (marian.mjs)
//   other    ("m2m100", and "marian" exports made before that) ids only: encode/decode throw one line
//
// Runtime-agnostic: the caller reads the files a tokenizer needs (`tokenizerFiles`) and passes
// their parsed JSON, so Node (exported.mjs) and the browser page (../web/app.mjs) share this file.
import { Tokenizer } from '@huggingface/tokenizers';
import { exactCharsmaps } from './charsmap.mjs';
import { marianFiles, marianTokenizer } from './marian.mjs';

const SPECIALS = ['<pad>', '<bos>', '<eos>']; // ids 0, 1, 2 of every "chars" vocabulary
const EOS = 2;
const LANG = '{lang}'; // the source language's token in an "hf" template
const TEXT_TYPES = ['chars', 'hf', 'marian'];

/** Python's repr() of a string, as the Python runtime's messages show codes and tokens. */
function repr(text) {
  const s = String(text);
  return s.includes("'") && !s.includes('"') ? `"${s}"` : `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/**
 * A tokenizer's languages (Python's text.languages.Languages): code -> the token that marks it on
 * the source (`source`) or starts the target (`target`); `pair`: a single-pair model's codes.
 */
export function makeLanguages(data) {
  const source = { ...(data?.source ?? {}) };
  const target = { ...(data?.target ?? {}) };
  const pair = data?.pair ?? null;
  const sourceDefault = data?.source_default ?? null;

  /** A model without language tokens takes no code, or its own single one. */
  function known(code, single, side) {
    if (code !== null && code !== undefined && code !== single) {
      const what = single ? `only ${repr(single)}` : 'no language codes (it translates one pair)';
      throw new Error(`${side} language ${repr(code)} does not apply: this model takes ${what}`);
    }
  }

  // As Python's text.languages.suggest: the codes that begin with the unknown one, or the first 40.
  function suggest(code, codes) {
    const close = code ? codes.filter((c) => c.toLowerCase().startsWith(String(code).toLowerCase())) : [];
    if (close.length) {
      return `did you mean ${close.slice(0, 8).join(', ')}? (this model knows ${codes.length} codes; ` +
        '`tfm-export languages FOLDER` lists them)';
    }
    return `this model knows ${codes.slice(0, 40).join(', ')}${codes.length > 40 ? ', ...' : ''}`;
  }

  function check(code, tokens, side) {
    if (!Object.hasOwn(tokens, code)) {
      throw new Error(`unknown ${side} language ${repr(code)}; ${suggest(code, Object.keys(tokens).sort())}`);
    }
    return tokens[code];
  }

  return {
    source, target, sourceDefault, pair, targetOnSource: Boolean(data?.target_on_source),
    /** The token that marks source language `code` (none given: the default); null without languages. */
    sourceToken(code) {
      const chosen = code || sourceDefault; // Python's `code or default`: '' is no code
      if (!Object.keys(source).length || chosen === null || chosen === undefined) {
        known(chosen ?? null, pair?.[0] ?? null, 'source');
        return null;
      }
      return check(chosen, source, 'source');
    },
    /** The token that starts target language `code`; null when no code is given (the model chooses). */
    targetToken(code) {
      if (code === null || code === undefined) return null;
      if (!Object.keys(target).length) {
        known(code, pair?.[1] ?? null, 'target');
        return null;
      }
      return check(code, target, 'target');
    },
    /** The codes of `side` ('source' or 'target'), sorted; a single-pair model's own code. */
    codes(side) {
      const single = pair?.[side === 'source' ? 0 : 1];
      const codes = Object.keys(side === 'source' ? source : target).sort();
      return codes.length ? codes : (single ? [single] : []);
    },
  };
}

/** The files beside manifest.json that `spec` needs (read them and pass them to makeTokenizer). */
export function tokenizerFiles(spec) {
  if (spec?.type === 'marian') return marianFiles(spec);
  return spec?.type === 'hf' ? [spec.file ?? 'tokenizer.json'] : [];
}

/**
 * The manifest's tokenizer, or null when the export has none. `files`: file name -> parsed JSON of
 * each of `tokenizerFiles(spec)`. Types this runtime cannot encode give an ids-only tokenizer.
 */
export function makeTokenizer(spec, files = {}) {
  if (!spec) return null;
  if (spec.type === 'chars') return charsTokenizer(spec);
  if (spec.type === 'hf') return hfTokenizer(spec, files);
  if (spec.type === 'marian' && spec.sentencepiece) return marianTokenizer(spec, files, makeLanguages(spec.languages));
  return idsOnlyTokenizer(spec);
}

/** One id per character: ids are positions in `src_vocab` / `tgt_vocab`, the first `specials` being pad, bos, eos. */
function charsTokenizer(spec) {
  const specials = spec.specials ?? SPECIALS.length;
  for (const name of ['src_vocab', 'tgt_vocab']) {
    if (!Array.isArray(spec[name]) || SPECIALS.some((s, i) => spec[name][i] !== s)) {
      throw new Error(`tokenizer ${name} must start with ${SPECIALS.join(', ')}; re-export the model`);
    }
  }
  const index = new Map();
  spec.src_vocab.forEach((ch, i) => { if (i >= specials) index.set(ch, i); });
  const allowed = spec.src_vocab.slice(specials).join('');
  const appendEos = spec.append_eos ?? true;
  const languages = makeLanguages(null);
  return {
    kind: 'chars',
    languages,
    /** Source text -> ids (+ eos when the manifest says so); a language code is an error (none apply). */
    encode(text, sourceLang, targetLang) {
      languages.sourceToken(sourceLang);
      languages.targetToken(targetLang);
      const chars = [...text];
      const unknown = [...new Set(chars.filter((ch) => !index.has(ch)))].sort().join('');
      if (unknown) {
        const shown = chars.length <= 60 ? text : `${chars.slice(0, 57).join('')}...`;
        throw new Error(`cannot encode ${JSON.stringify(unknown)} in ${JSON.stringify(shown)}: ` +
          `the model knows only the characters ${JSON.stringify(allowed)}`);
      }
      const ids = chars.map((ch) => index.get(ch));
      return appendEos ? [...ids, EOS] : ids;
    },
    forcedBos: () => null,
    /** Target ids -> text; special and out-of-range ids are skipped. */
    decode(ids) {
      return ids.filter((i) => i >= specials && i < spec.tgt_vocab.length).map((i) => spec.tgt_vocab[i]).join('');
    },
  };
}

/** transformers' clean_up_tokenization (Python: text.hf.clean_up_spaces): no space before punctuation and contractions. */
export function cleanUpSpaces(text) {
  const rules = [[' .', '.'], [' ?', '?'], [' !', '!'], [' ,', ','], [" ' ", "'"], [" n't", "n't"],
    [" 'm", "'m"], [" 's", "'s"], [" 've", "'ve"], [" 're", "'re"]];
  return rules.reduce((out, [before, after]) => out.replaceAll(before, after), text);
}

const STRIP_RIGHT = { type: 'Strip', strip_left: false, strip_right: true };

/**
 * tokenizer.json's data with STRIP_RIGHT after its charsmap ("Precompiled"), else first (Python:
 * text.hf.with_right_strip): where transformers' MBart classes strip trailing whitespace.
 */
function withRightStrip(json) {
  const normalizer = json.normalizer;
  const steps = !normalizer ? [] : normalizer.type === 'Sequence' ? [...(normalizer.normalizers ?? [])] : [normalizer];
  const at = steps[0]?.type === 'Precompiled' ? 1 : 0;
  return { ...json, normalizer: { type: 'Sequence', normalizers: [...steps.slice(0, at), STRIP_RIGHT, ...steps.slice(at)] } };
}

/** The library's Tokenizer over a parsed tokenizer.json; a file it cannot read is one line. */
function loadTokenizerJson(file, json, stripRight = false) {
  if (json === undefined || json === null) {
    throw new Error(`${file} was not given to the tokenizer; read it from the export folder (tokenizerFiles)`);
  }
  try {
    // Clean-up is ours (clean_up_spaces in the manifest), not the library's default of true.
    const tokenizer = new Tokenizer(stripRight ? withRightStrip(json) : json, { clean_up_tokenization_spaces: false });
    tokenizer.normalizer = exactCharsmaps(tokenizer.normalizer); // SentencePiece's rules, not NFKC (charsmap.mjs)
    return tokenizer;
  } catch (err) {
    const reason = err.message.split('\n')[0];
    throw new Error(`${file} is not a tokenizer.json this runtime can read (${reason}); re-export the model`);
  }
}

/**
 * tokenizer.json without its post-processor, wrapped in the family's template: `source_prefix` +
 * ids + `source_suffix`, where "{lang}" is the source language's token (dropped when none applies).
 * Decoding skips special tokens (and ids outside the vocabulary, as the Rust library does).
 */
function hfTokenizer(spec, files) {
  const file = spec.file ?? 'tokenizer.json';
  const tokenizer = loadTokenizerJson(file, files[file], Boolean(spec.strip_right));
  const languages = makeLanguages(spec.languages);
  const prefix = spec.source_prefix ?? [];
  const suffix = spec.source_suffix ?? ['</s>'];
  const cleanUp = Boolean(spec.clean_up_spaces);
  const tokenId = (token) => {
    const id = tokenizer.token_to_id(token);
    if (id === undefined) throw new Error(`${file} has no token ${repr(token)}; the folder mixes two models`);
    return id;
  };
  // Every token of the template and the languages is in the vocabulary: checked once, up front.
  [...prefix, ...suffix].filter((t) => t !== LANG).forEach(tokenId);
  [...Object.values(languages.source), ...Object.values(languages.target)].forEach(tokenId);
  const wrap = (template, marker) => template.filter((t) => t !== LANG || marker)
    .map((t) => tokenId(t === LANG ? marker : t));
  return {
    kind: 'hf',
    languages,
    /** Source text -> ids in the family's template; `sourceLang` picks the "{lang}" token. */
    encode(text, sourceLang) {
      const marker = languages.sourceToken(sourceLang);
      const ids = tokenizer.encode(text, { add_special_tokens: false }).ids;
      return [...wrap(prefix, marker), ...ids, ...wrap(suffix, marker)];
    },
    /** The id forced as the first generated token for `targetLang` (null: none is forced). */
    forcedBos(targetLang) {
      const token = languages.targetToken(targetLang);
      return token ? tokenId(token) : null;
    },
    /** Target ids -> text, special tokens skipped, spaces cleaned up when the manifest says so. */
    decode(ids) {
      const known = ids.map(Number).filter((id) => tokenizer.id_to_token(id) !== undefined);
      const text = known.length ? tokenizer.decode(known, { skip_special_tokens: true }) : '';
      return cleanUp ? cleanUpSpaces(text) : text;
    },
  };
}

/** A tokenizer this runtime cannot run (M2M100's SentencePiece, older Marian exports): the export still decodes ids. */
function idsOnlyTokenizer(spec) {
  const known = TEXT_TYPES.map((t) => JSON.stringify(t)).join(', ');
  const why = spec.type === 'marian'
    ? 'this "marian" export has no source.tokenizer.json (exported before tfm-export wrote one, or its SentencePiece ' +
      'model is not one this runtime reproduces: the export log says which); re-export it with this version, '
    : `tokenizer type ${JSON.stringify(spec.type)} is not supported by this runtime (only ${known}); `;
  const refuse = () => {
    throw new Error(`${why}pass token ids, or use the Python runtime (tfm_export.runtime)`);
  };
  return { kind: spec.type, languages: makeLanguages(spec.languages), idsOnly: true, encode: refuse, decode: refuse,
    forcedBos: refuse };
}

/** Decoding options that make the output `targetLang` (Python's language_options): the forced first token. */
export function languageOptions(tokenizer, targetLang) {
  if (targetLang === null || targetLang === undefined) return {};
  if (!tokenizer) throw new Error(`target language ${repr(targetLang)} needs a tokenizer; this export has none`);
  const forced = tokenizer.forcedBos(targetLang);
  return forced === null ? {} : { forcedBosTokenId: forced };
}

/** The language codes a manifest's tokenizer takes (Python's `tfm-export languages --json`). */
export function languageCodes(spec) {
  const languages = makeLanguages(spec?.languages);
  return { source: languages.codes('source'), target: languages.codes('target'), sourceDefault: languages.sourceDefault };
}
