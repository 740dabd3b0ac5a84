// Marian's tokenizer (the manifest's "marian" type) without the sentencepiece library: the rules of
// the Python runtime's (tfm_export/text/marian.py, after transformers' MarianTokenizer), on the files
// the export writes for it (tfm_export/text/spm_json.py):
//
//   encode  a target language's >>code<< first (multi-target models), the special tokens split out
//           of the text, a leading >>code<< kept as one piece, the rest through the source model
//           (source.tokenizer.json: its pieces, scores and charsmap, segmented exactly as the
//           sentencepiece library does: sentencepiece.mjs), each piece its vocab.json id (<unk> if
//           none), then </s>
//   decode  special ids dropped, ids -> target pieces (vocab.json, or target_vocab.json), joined as
//           target.spm joins them (control pieces are empty), word markers -> spaces, stripped
//
// Exports made before the conversion, or of SentencePiece models it does not reproduce, have no
// "sentencepiece" section: their tokenizer stays ids only (tokenizer.mjs).
import { findCharsmap, SentencePieceNormalizer, SentencePieceUnigram } from './sentencepiece.mjs';

const WORD_MARKER = '\u2581';
const SPECIALS = { unk_token: '<unk>', eos_token: '</s>', pad_token: '<pad>' }; // Python's SPECIAL_DEFAULTS
// Python's str.strip(): its whitespace, which differs from String.prototype.trim's (U+001C..U+001F, U+0085; no U+FEFF).
const PY_SPACE = '[\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]';
const PY_STRIP = new RegExp(`^${PY_SPACE}+|${PY_SPACE}+$`, 'g');

/** The files beside manifest.json that a "marian" spec needs; none (ids only) without its "sentencepiece" section. */
export function marianFiles(spec) {
  if (!spec.sentencepiece) return [];
  return [spec.sentencepiece.source.file, spec.vocab ?? 'vocab.json', ...(spec.target_vocab ? [spec.target_vocab] : [])];
}

/** `files[name]`, or one line saying that the caller did not read it. */
function given(files, name) {
  const json = files[name];
  if (json === undefined || json === null) {
    throw new Error(`${name} was not given to the tokenizer; read it from the export folder (tokenizerFiles)`);
  }
  return json;
}

/** vocab.json (piece -> id) as a Map; one line when it is not one. */
function vocabulary(name, json) {
  const entries = Object.entries(json);
  if (!entries.length || entries.some(([, id]) => !Number.isInteger(id))) {
    throw new Error(`${name} must map pieces to integer ids; re-export the model`);
  }
  return new Map(entries);
}

/** The source model: text -> its pieces, as sentencepiece segments them (sentencepiece.mjs). */
function sourceModel(rules, json) {
  const normalizer = new SentencePieceNormalizer({ charsmap: findCharsmap(json.normalizer),
    addDummyPrefix: rules.add_dummy_prefix ?? true, removeExtraWhitespaces: rules.remove_extra_whitespaces ?? true });
  let model;
  try {
    model = new SentencePieceUnigram(json.model);
  } catch (err) {
    throw new Error(`${rules.file} cannot be read: ${err.message}; re-export the model`);
  }
  return (text) => model.pieces(normalizer.normalize(text));
}

const escape = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * The Marian tokenizer of `spec` (the manifest's section) over `files` (name -> parsed JSON of each of
 * `marianFiles(spec)`); `languages`: tokenizer.mjs's makeLanguages of the spec.
 */
export function marianTokenizer(spec, files, languages) {
  const rules = spec.sentencepiece;
  const pieces = sourceModel(rules.source, given(files, rules.source.file));
  const vocabName = spec.vocab ?? 'vocab.json';
  const encoder = vocabulary(vocabName, given(files, vocabName));
  const target = spec.target_vocab ? vocabulary(spec.target_vocab, given(files, spec.target_vocab)) : encoder;
  const decoder = new Map([...target].map(([piece, id]) => [id, piece]));
  const specials = Object.entries(SPECIALS).map(([key, token]) => spec[key] || token);
  const missing = specials.filter((token) => !encoder.has(token));
  if (missing.length) throw new Error(`${vocabName} has no ${missing.join(', ')}; it is not a Marian vocabulary`);
  const [unkId, eosId] = specials.map((token) => encoder.get(token));
  const specialIds = new Set(specials.map((token) => encoder.get(token)));
  const split = new RegExp(`(${[...specials].sort((a, b) => b.length - a.length).map(escape).join('|')})`);
  const controls = new Set(rules.target.controls ?? []);
  const joined = (piece) => (controls.has(piece) ? '' : piece === rules.target.unk ? rules.target.unk_surface : piece);

  /** A chunk without special tokens -> pieces; a leading ">>code<<" is one piece (Python's _pieces). */
  function chunkPieces(chunk) {
    const end = chunk.startsWith('>>') ? chunk.indexOf('<<') : -1;
    return end === -1 ? pieces(chunk) : [chunk.slice(0, end + 2), ...pieces(chunk.slice(end + 2))];
  }

  return {
    kind: 'marian',
    languages,
    /** Source text -> ids + </s>; `targetLang` puts its >>code<< first (multi-target models). */
    encode(text, sourceLang, targetLang) {
      languages.sourceToken(sourceLang); // Marian marks no source language: a code is checked, then refused
      const token = languages.targetOnSource ? languages.targetToken(targetLang) : null;
      const ids = [];
      for (const chunk of (token ? `${token} ${text}` : text).split(split)) {
        if (specials.includes(chunk)) ids.push(encoder.get(chunk));
        else if (chunk) ids.push(...chunkPieces(chunk).map((piece) => encoder.get(piece) ?? unkId));
      }
      return [...ids, eosId];
    },
    /** Marian's target language rides on the source: nothing is forced (a single pair checks the code). */
    forcedBos(targetLang) {
      if (!languages.targetOnSource) languages.targetToken(targetLang);
      return null;
    },
    /** Target ids -> text: special and unknown ids dropped, pieces joined as target.spm joins them. */
    decode(ids) {
      const kept = ids.map(Number).filter((id) => !specialIds.has(id) && decoder.has(id));
      const text = kept.map((id) => joined(decoder.get(id))).join('').replaceAll(WORD_MARKER, ' ');
      return text.replace(PY_STRIP, '');
    },
  };
}
