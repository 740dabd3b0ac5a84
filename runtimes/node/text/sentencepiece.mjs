// SentencePiece's encoding exactly as the sentencepiece library runs it, for tokenizers that Python
// runs with that library (Marian's source.spm, written as source.tokenizer.json: marian.mjs).
//
// Why not @huggingface/tokenizers (and charsmap.mjs): they follow the Rust `tokenizers` library,
// which differs from sentencepiece in two places, both seen on the test fixtures' models:
// - the charsmap: Rust takes, per grapheme, the shortest matching prefix and drops the rest of the
//   grapheme; sentencepiece (normalizer.cc) takes the longest matching prefix, byte position by byte
//   position, and handles spaces as it goes (leading ones dropped, a run kept as one, trailing ones
//   dropped: remove_extra_whitespaces; a word marker "▁" before the text: add_dummy_prefix, and in
//   place of every space). "ﬂ\u0301" loses its combining mark in Rust, not in sentencepiece.
// - the Viterbi search: sentencepiece adds scores in float32 (unigram_model.cc, EncodeOptimized), the
//   libraries in float64, so where two segmentations tie ("..." as "." + ".." or ".." + "."), float32
//   rounding of the path so far picks one in sentencepiece and float64's may pick the other.
import { parseCharsmap, prefixRules, ruleText } from './charsmap.mjs';

const WORD_MARKER = '\u2581';
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

/** The byte length of the UTF-8 character whose first byte is `lead` (the text came from TextEncoder: valid). */
const charLength = (lead) => (lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4);

/**
 * SentencePiece's normalised text, word markers included. `charsmap`: the model's
 * precompiled_charsmap (base64; none: no rules).
 */
export class SentencePieceNormalizer {
  constructor({ charsmap = null, addDummyPrefix = true, removeExtraWhitespaces = true } = {}) {
    this.map = charsmap ? parseCharsmap(charsmap) : null;
    this.addDummyPrefix = addDummyPrefix;
    this.removeExtraWhitespaces = removeExtraWhitespaces;
  }

  /** NormalizePrefix: [the text that the bytes at `at` become, how many bytes that consumes]. */
  prefix(bytes, at) {
    const rules = this.map ? prefixRules(this.map.units, bytes, at) : [];
    if (rules.length) {
      const [length, value] = rules[rules.length - 1]; // the longest rule
      return [ruleText(this.map, value), length];
    }
    const length = charLength(bytes[at]);
    return [fromUtf8.decode(bytes.subarray(at, at + length)), length];
  }

  normalize(text) {
    const bytes = utf8.encode(text);
    let at = 0;
    while (this.removeExtraWhitespaces && at < bytes.length) { // leading spaces
      const [out, length] = this.prefix(bytes, at);
      if (out !== ' ') break;
      at += length;
    }
    if (at >= bytes.length) return '';
    let normalized = this.addDummyPrefix ? WORD_MARKER : '';
    let afterSpace = this.removeExtraWhitespaces;
    while (at < bytes.length) {
      let [out, length] = this.prefix(bytes, at);
      while (afterSpace && out.startsWith(' ')) out = out.slice(1); // a run of spaces is one
      if (out) {
        normalized += out.replaceAll(' ', WORD_MARKER);
        afterSpace = out.endsWith(' ');
      }
      at += length;
      if (!this.removeExtraWhitespaces) afterSpace = false;
    }
    while (this.removeExtraWhitespaces && normalized.endsWith(WORD_MARKER)) normalized = normalized.slice(0, -1);
    return normalized;
  }
}

/** The precompiled charsmap of a tokenizer.json's normaliser (alone or in a Sequence), or null. */
export function findCharsmap(normalizer) {
  if (!normalizer) return null;
  if (normalizer.type === 'Precompiled') return normalizer.precompiled_charsmap ?? null;
  const found = (normalizer.normalizers ?? []).map(findCharsmap).filter(Boolean);
  return found[0] ?? null;
}

const UNK_PENALTY = 10; // sentencepiece's kUnkPenalty: an unknown character scores min_score - 10

/**
 * A unigram model (tokenizer.json's "Unigram": [piece, score] pairs and unk_id) segmenting as
 * sentencepiece's EncodeOptimized: for each end position the best path ending there, candidates taken
 * by start position and a later one only when strictly better, scores added in float32; a character
 * that no piece starts with is unknown. Consecutive unknown pieces are merged, as its processor does.
 */
export class SentencePieceUnigram {
  constructor(model) {
    if (model?.type !== 'Unigram' || !Array.isArray(model.vocab) || !Number.isInteger(model.unk_id)) {
      throw new Error('its model is not a SentencePiece unigram model (type "Unigram", vocab, unk_id)');
    }
    this.scores = new Map();
    let min = Infinity;
    let longest = 1;
    model.vocab.forEach(([piece, score], id) => {
      if (id === model.unk_id) return; // never matched in text; its score is not a piece's
      this.scores.set(piece, Math.fround(score));
      min = Math.min(min, score);
      longest = Math.max(longest, [...piece].length);
    });
    this.unkScore = Math.fround(min - UNK_PENALTY);
    this.longest = longest;
  }

  /** The pieces of `normalized` (text as SentencePieceNormalizer gives it). */
  pieces(normalized) {
    const chars = [...normalized];
    const best = chars.map(() => null).concat([null]); // end -> { score, start, unk }
    best[0] = { score: 0, start: -1, unk: false };
    for (let start = 0; start < chars.length; start += 1) {
      const before = best[start].score;
      const offer = (end, score, unk) => {
        const total = Math.fround(score + before);
        if (best[end] === null || total > best[end].score) best[end] = { score: total, start, unk };
      };
      let piece = '';
      let single = false;
      for (let end = start + 1; end <= Math.min(chars.length, start + this.longest); end += 1) {
        piece += chars[end - 1];
        const score = this.scores.get(piece);
        if (score === undefined) continue;
        offer(end, score, false);
        single ||= end === start + 1;
      }
      if (!single) offer(start + 1, this.unkScore, true);
    }
    return this.backtrack(chars, best);
  }

  backtrack(chars, best) {
    const found = [];
    for (let end = chars.length; end > 0; end = best[end].start) {
      const { start, unk } = best[end];
      const piece = chars.slice(start, end).join('');
      const last = found[found.length - 1];
      if (unk && last?.unk) last.piece = piece + last.piece; // merged runs of unknown characters
      else found.push({ piece, unk });
    }
    return found.reverse().map(({ piece }) => piece);
  }
}
