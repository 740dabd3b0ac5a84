// Whisper's rules over one row of a step's scores: the port of tfm_export/runtime/speech/rules.py
// (transformers' Whisper logits processors; their docstrings are the specification):
// - the processors, in place on one row (scores, and the row's decoder input so far `history`: the
//   prompt, then the generated ids): `suppress`, `suppressAtBegin`, `timestampRules`; as LogitsProcessor
//   objects (decode/processors.mjs: `process(scores, history, step)`) `SuppressTokens`, `SuppressAtBegin`,
//   `TimestampRules`, which `whisperProcessors` lists in transformers' order for a core strategy's
//   `processors` (TokenPicker, BeamSearch run them after their generic processors); `whisperProcess`
//   applies that list once. Greedy and sampling pass logits, beam search log_softmax(logits).
// - `detectLanguage`: the argmax over the language tokens of the step that fed <|startoftranscript|>;
//   `noSpeechProb`: softmax of that step's logits at <|nospeech|> (WhisperNoSpeechDetection).
// No globals beyond ECMAScript: a page can import it.
import { argmax, logSoftmax, pairwiseSum, scratch } from '../decode/processors.mjs';

/** `tokens` banned in one row (ids outside the row ignored), in place. */
export function suppress(scores, tokens) {
  for (const t of tokens) if (t >= 0 && t < scores.length) scores[t] = -Infinity;
  return scores;
}

/** begin_suppress_tokens: `tokens` banned at the first generated position (a decoder input `length` ids long,
 * the forced prompt's `beginIndex`), in place. */
export function suppressAtBegin(scores, length, beginIndex, tokens) {
  return length === beginIndex ? suppress(scores, tokens) : scores;
}

/** The largest of x[from, to), -Infinity for none. */
function maxOf(x, from, to) {
  let top = -Infinity;
  for (let t = from; t < to; t++) if (x[t] > top) top = x[t];
  return top;
}

/** log(sum(exp(x))) of x[from, to), -Infinity when all are -Infinity (Python's _logsumexp, numpy's sum). */
function logSumExp(x, from, to) {
  const top = maxOf(x, from, to);
  if (top === -Infinity) return -Infinity;
  const exp = scratch(to - from);
  for (let t = from; t < to; t++) exp[t - from] = Math.exp(x[t] - top);
  return top + Math.log(pairwiseSum(exp, 0, to - from));
}

/**
 * Whether the timestamps' summed probability beats every text token's (Python's from_logprob test, step
 * by step): log_softmax of the row in scratch row 1, its sums in row 0, so no step allocates.
 */
function timestampsWin(scores, begin) {
  const n = scores.length;
  const top = maxOf(scores, 0, n);
  if (top === -Infinity) return false; // numpy: a row of -inf gives nan, and nan > x is false
  const exp = scratch(n);
  for (let t = 0; t < n; t++) exp[t] = Math.exp(scores[t] - top);
  const lse = Math.log(pairwiseSum(exp, 0, n));
  const logp = scratch(n, 1).subarray(0, n);
  for (let t = 0; t < n; t++) logp[t] = (scores[t] - top) - lse;
  return logSumExp(logp, begin, n) > maxOf(logp, 0, begin);
}

/**
 * WhisperTimeStampLogitsProcessor on one row (Python's timestamp_rules), in place: <|notimestamps|>
 * banned; after a lone timestamp only timestamps or the ids from EOS on, after a pair no timestamp;
 * timestamps never decrease; the first generated token is a timestamp at most
 * max_initial_timestamp_index; and when the timestamps' summed probability beats every text token's,
 * only timestamps. `history`: the row's decoder input (prompt, then generated ids); `beginIndex`: the
 * forced prompt's length.
 */
export function timestampRules(scores, history, beginIndex, noTimestampsTokenId, eosTokenId,
  maxInitialTimestampIndex = null) {
  const nts = noTimestampsTokenId;
  const begin = nts + 1;
  const ban = (from, to) => { for (let t = Math.max(from, 0); t < Math.min(to, scores.length); t++) scores[t] = -Infinity; };
  scores[nts] = -Infinity;
  const row = history.slice(beginIndex);
  const last = row.length >= 1 && row.at(-1) >= begin;
  const penultimate = row.length < 2 || row.at(-2) >= begin;
  if (last) ban(...(penultimate ? [begin, scores.length] : [0, eosTokenId]));
  const stamps = row.filter((t) => t >= begin);
  const floor = !stamps.length ? begin : last && !penultimate ? stamps.at(-1) : stamps.at(-1) + 1;
  ban(begin, floor);
  if (history.length === beginIndex) {
    ban(0, begin);
    const most = maxInitialTimestampIndex;
    if (most !== undefined && most !== null) ban(begin + most + 1, scores.length);
  }
  if (timestampsWin(scores, begin)) ban(0, begin);
  return scores;
}

/** `suppress` as a LogitsProcessor: suppress_tokens, banned at every step. */
export class SuppressTokens {
  constructor(tokens) { this.tokens = tokens; }

  process(scores) { return suppress(scores, this.tokens); }
}

/** `suppressAtBegin` as a LogitsProcessor: begin_suppress_tokens at the first generated position. */
export class SuppressAtBegin {
  constructor(tokens, beginIndex) { Object.assign(this, { tokens, beginIndex }); }

  process(scores, history) { return suppressAtBegin(scores, history.length, this.beginIndex, this.tokens); }
}

/** `timestampRules` as a LogitsProcessor (WhisperTimeStampLogitsProcessor); `beginIndex`: the forced prompt's length. */
export class TimestampRules {
  constructor(beginIndex, noTimestampsTokenId, eosTokenId, maxInitialTimestampIndex = null) {
    Object.assign(this, { beginIndex, noTimestampsTokenId, eosTokenId, maxInitialTimestampIndex });
  }

  process(scores, history) {
    return timestampRules(scores, history, this.beginIndex, this.noTimestampsTokenId, this.eosTokenId,
      this.maxInitialTimestampIndex);
  }
}

/**
 * Whisper's processors in transformers' order (begin_suppress_tokens, suppress_tokens, then the timestamp
 * rules when `timestamps`) for rows whose forced decoder prompt is `beginIndex` ids long.
 */
export function whisperProcessors(settings, beginIndex, timestamps = false) {
  const rules = [new SuppressAtBegin(settings.begin_suppress_tokens, beginIndex), new SuppressTokens(settings.suppress_tokens)];
  if (timestamps) {
    const nts = settings.no_timestamps_token_id;
    if (nts === undefined || nts === null) {
      throw new Error('this Whisper model has no timestamp tokens (no_timestamps_token_id): it takes no timestamps');
    }
    rules.push(new TimestampRules(beginIndex, nts, settings.eos_token_id, settings.max_initial_timestamp_index ?? null));
  }
  return rules;
}

/** `whisperProcessors` applied to one row's `scores` (in place; returned). */
export function whisperProcess(scores, history, beginIndex, settings, timestamps = false) {
  for (const rule of whisperProcessors(settings, beginIndex, timestamps)) {
    scores = rule.process(scores, history, history.length - beginIndex);
  }
  return scores;
}

/** The language id with the highest logit among lang_to_id's tokens (ties: the lower id), as detect_language. */
export function detectLanguage(logits, settings) {
  const ids = Object.values(settings.lang_to_id ?? {}).sort((a, b) => a - b);
  if (!ids.length) throw new Error('this Whisper model is English-only: there is no language to detect');
  return ids[argmax(ids.map((id) => logits[id]))];
}

/** P(<|nospeech|>) of one row of logits (WhisperNoSpeechDetection: softmax of the raw logits); null without the token. */
export function noSpeechProb(logits, settings) {
  const nts = settings.no_timestamps_token_id;
  if (nts === undefined || nts === null) return null;
  return Math.exp(logSoftmax(logits)[nts - 1]);
}
