// SentencePiece's precompiled charsmap normalizer (tokenizer.json's "Precompiled"), exactly as the
// Rust `tokenizers` library runs it (normalizers/precompiled.rs over the spm_precompiled crate).
//
// Why not the library's own: @huggingface/tokenizers approximates "Precompiled" with NFKC plus a few
// replacements and never reads the charsmap, so it differs from Python wherever the model's rules
// differ from NFKC (e.g. it turns U+200D ZERO WIDTH JOINER, kept by nmt_nfkc, into a space). A model
// tokenised differently from its training is silently worse, so the charsmap is read here.
//
// The charsmap (base64): u32 little-endian trie size in bytes, the trie (u32 units of a Darts
// double array over UTF-8 bytes, each leaf's value an offset into the next part), then the
// replacement strings, each ending in NUL. The rule (Rust's, "weird" by its own comment): a grapheme
// shorter than 6 UTF-8 bytes whose shortest matching prefix has a rule becomes that rule's string;
// otherwise each of its characters is replaced by its own rule, if it has one.
import { Normalizer, PrecompiledNormalizer, SequenceNormalizer } from '@huggingface/tokenizers';

const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();
const graphemes = new Intl.Segmenter('en', { granularity: 'grapheme' }); // extended grapheme clusters, as Rust's

const hasLeaf = (unit) => ((unit >>> 8) & 1) === 1;
const value = (unit) => unit & 0x7fffffff;
const label = (unit) => (unit & 0x800000ff) >>> 0;
const offset = (unit) => (unit >>> 10) * ((unit & 0x200) ? 256 : 1);

/** The charsmap's trie units and replacement strings (UTF-8, NUL-separated). */
export function parseCharsmap(base64) {
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const size = view.getUint32(0, true);
  if (size % 4 !== 0 || 4 + size > bytes.length) throw new Error('precompiled_charsmap is truncated; re-export the model');
  const units = Uint32Array.from({ length: size / 4 }, (_, i) => view.getUint32(4 + 4 * i, true));
  return { units, strings: bytes.subarray(4 + size) };
}

/**
 * Darts' common prefix search over the UTF-8 bytes `key` from `start`: [length, value] of every prefix
 * with a rule, shortest first (the Rust library takes the first; SentencePiece the last: sentencepiece.mjs).
 */
export function prefixRules(units, key, start = 0) {
  const found = [];
  let pos = offset(units[0]);
  for (let i = start; i < key.length && key[i] !== 0; i += 1) {
    pos ^= key[i];
    const unit = units[pos];
    if (unit === undefined || label(unit) !== key[i]) break;
    pos ^= offset(unit);
    if (hasLeaf(unit)) found.push([i + 1 - start, value(units[pos])]);
  }
  return found;
}

/** The replacement string that starts at `at` in the charsmap's strings (NUL-terminated UTF-8). */
export function ruleText(map, at) {
  const end = map.strings.indexOf(0, at);
  return fromUtf8.decode(map.strings.subarray(at, end < 0 ? undefined : end));
}

/** A normalizer of the library's kind (callable, `normalize(text)`) that applies the charsmap exactly. */
export class CharsmapNormalizer extends Normalizer {
  constructor(config) {
    super(config);
    this.map = config.precompiled_charsmap ? parseCharsmap(config.precompiled_charsmap) : null;
  }

  /** The replacement of `chunk` (its shortest prefix's rule), or null when no rule matches. */
  transform(chunk) {
    const [shortest] = prefixRules(this.map.units, utf8.encode(chunk));
    return shortest ? ruleText(this.map, shortest[1]) : null;
  }

  normalize(text) {
    if (!this.map) return text;
    let out = '';
    for (const { segment } of graphemes.segment(text)) {
      const whole = utf8.encode(segment).length < 6 ? this.transform(segment) : null;
      if (whole !== null) {
        out += whole;
        continue;
      }
      for (const ch of segment) out += this.transform(ch) ?? ch;
    }
    return out;
  }
}

/**
 * `normalizer` (a library Tokenizer's `normalizer`) with every "Precompiled" in it, also inside a
 * "Sequence", replaced by a CharsmapNormalizer. Added tokens that the library normalised while it
 * was built keep the approximate form (special tokens, the usual case, are never normalised).
 */
export function exactCharsmaps(normalizer) {
  if (normalizer instanceof PrecompiledNormalizer) return new CharsmapNormalizer(normalizer.config);
  if (normalizer instanceof SequenceNormalizer) normalizer.normalizers = normalizer.normalizers.map(exactCharsmaps);
  return normalizer;
}
