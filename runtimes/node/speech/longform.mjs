// Whisper's timestamps -> segments, and the window-by-window loop of long recordings: the port of
// tfm_export/runtime/speech/longform.py (transformers' `_retrieve_segment` and long-form generate). Each
// window: decode it from `seek` (frames of 10 ms; the features zero-padded to one window) after its prompt
// (`windowPrompt`: the initial prompt, or with condition_on_prev_tokens the text of the segments before it,
// faster-whisper's hotwords after <|startofprev|>), at each temperature of the fallback while speech/fallback.mjs
// judges the try to need it (a prefix forced as the first window's first ids), cut its ids into
// segments at each pair of timestamp tokens, and move seek to the last pair's time, or a whole window
// when the ids end with a lone timestamp or have no pair. `windowDecoder` decodes one window with
// speech/search.mjs's strategy through a runner (`cacheRunner`: decode/loop.mjs's `run` on a cache).
// No globals beyond ECMAScript: a page can import it (pako through its import map).
import { deflate } from 'pako';
import { run } from '../decode/loop.mjs';
import { DETECT, maxNewTokens } from './prompt.mjs';
import { Fallback } from './fallback.mjs';
import { whisperStrategy } from './search.mjs';

export const TIME_PRECISION = 0.02; // seconds per timestamp token
export const FEATURE_PRECISION = 0.01; // seconds per mel frame
const INPUT_STRIDE = 2; // mel frames per encoder position (Whisper's two convolutions)

/**
 * A window's generated ids (EOS removed) -> { segments: [{ start, end, tokens }], advance } (Python's
 * split_segments): `advance` is the frames seek moves by; `windowFrames` the real frames the window held.
 */
export function splitSegments(ids, timestampBegin, timeOffset, windowFrames) {
  const stamp = ids.map((t) => t >= timestampBegin);
  const singleEnding = stamp.length >= 2 && !stamp.at(-2) && stamp.at(-1);
  const cuts = [];
  for (let i = 0; i < stamp.length - 1; i++) if (stamp[i] && stamp[i + 1]) cuts.push(i + 1);
  const time = (token) => timeOffset + (token - timestampBegin) * TIME_PRECISION;
  if (cuts.length) {
    if (singleEnding) cuts.push(ids.length);
    else cuts[cuts.length - 1] += 1; // the last segment keeps both timestamps
    const segments = [];
    let last = 0;
    cuts.forEach((cut, i) => {
      const piece = ids.slice(last, cut);
      const endAt = i < cuts.length - 1 || singleEnding ? piece.length - 1 : piece.length - 2;
      segments.push({ start: time(piece[0]), end: time(piece[endAt]), tokens: piece });
      last = cut;
    });
    const advance = singleEnding ? windowFrames : (ids[last - 2] - timestampBegin) * INPUT_STRIDE;
    return { segments, advance };
  }
  // transformers computes this in float32: (frames * 0.01) / 0.02, truncated
  const seconds = Math.fround(Math.fround(windowFrames) * Math.fround(FEATURE_PRECISION));
  let endPos = Math.trunc(Math.fround(seconds / Math.fround(TIME_PRECISION)));
  const stamps = ids.filter((t) => t >= timestampBegin);
  if (stamps.length && stamps.at(-1) !== timestampBegin) endPos = stamps.at(-1) - timestampBegin;
  return { segments: [{ start: timeOffset, end: timeOffset + endPos * TIME_PRECISION, tokens: ids }], advance: windowFrames };
}

/**
 * transformers' `_retrieve_compression_ratio` (Python's compression_ratio): raw bytes / zlib bytes of the ids,
 * each little-endian in trunc(log2(vocabSize) / 8) + 1 bytes. pako, zlib's port, compresses byte for byte as
 * Python's zlib does at its default level; Node's own zlib (Chromium's fork) does not.
 */
export function compressionRatio(ids, vocabSize) {
  const width = Math.trunc(Math.log2(vocabSize) / 8) + 1;
  const raw = new Uint8Array(ids.length * width);
  ids.forEach((id, i) => { for (let b = 0; b < width; b++) raw[i * width + b] = Math.floor(id / 256 ** b) % 256; });
  return raw.length / deflate(raw).length;
}

/**
 * The segments' ids for conditioning (Python's previous_text, transformers' `_pad_to_max_length` with
 * skip_ending_double_timestamps): a segment ending in two timestamps loses its last; the last `cutOff` ids.
 */
export function previousText(segments, timestampBegin, cutOff) {
  const ids = segments.flatMap(({ tokens: t }) => (t.length > 2 && t.at(-2) >= timestampBegin ? t.slice(0, -1) : t));
  return cutOff > 0 ? ids.slice(-cutOff) : ids;
}

/**
 * A window's forced decoder input (Python's window_prompt, transformers' `_prepare_decoder_input_ids`): with
 * `condition` and segments before it, <|startofprev|> (or the initial prompt, promptConditionType
 * "all-segments"), their text (`history`: the initial prompt's segment first, without <|startofprev|>, with
 * "first-segment") and the init tokens; else the initial prompt's ids (`promptIds`, <|startofprev|> first) and
 * the init tokens. `hotwordIds` (faster-whisper's) go right after <|startofprev|>.
 */
export function windowPrompt(settings, init, history, condition, promptIds, maxTargetPositions,
  promptConditionType = 'first-segment', hotwordIds = []) {
  const given = (v) => v !== undefined && v !== null;
  const suppressed = settings.suppress_tokens ?? [];
  const prev = given(settings.prev_sot_token_id) ? settings.prev_sot_token_id
    : suppressed.length >= 2 ? suppressed.at(-2) : null; // transformers' fallback for older folders
  let head = [...promptIds];
  let text = [];
  if (condition && history.length) {
    head = promptIds.length && promptConditionType === 'all-segments' ? [...promptIds] : given(prev) ? [prev] : [];
    const begin = settings.no_timestamps_token_id + 1;
    text = previousText(history, begin, Math.floor(maxTargetPositions / 2) - 1);
  }
  if (hotwordIds.length) head = [prev, ...hotwordIds, ...head.slice(1)]; // head[0], when there is one, is <|startofprev|>
  return [...head, ...text, ...init];
}

/** Frames [seek, seek + frames) of (nMels x total) features as one (nMels x windowFrames) window, zero-padded. */
export function featureWindow(features, nMels, total, seek, frames, windowFrames) {
  const out = new Float32Array(nMels * windowFrames); // zeros: transformers pads the window with 0.0
  for (let m = 0; m < nMels; m++) out.set(features.subarray(m * total + seek, m * total + seek + frames), m * windowFrames);
  return out;
}

/**
 * One recording's (nMels x total) features -> { ids, segments, windows } (Python's longform.transcribe):
 * `decodeWindow(window, prompt, temperature, forced)` -> the try's { ids (EOS removed), ended, avgLogprob,
 * noSpeechProb }; `prompt(segments, low)` the forced decoder input of the next window, given the segments so far
 * and whether the last window's kept try was below temperature 0.5 (conditioning on the text stops after one
 * that was not); `fallback` (speech/fallback.mjs) judges each try; `prefixIds` are forced as the first window's
 * first ids. Each window's { seek, temperature, avg_logprob, compression_ratio, no_speech_prob, skipped } is in
 * `windows` and on its segments (`window`), as Python's.
 */
export async function transcribeWindows(features, { nMels, total, windowFrames, timestampBegin, vocabSize, eosId },
  prompt, decodeWindow, fallback = new Fallback(), prefixIds = []) {
  const segments = [];
  const windows = [];
  let seek = 0;
  let low = true;
  while (seek < total) {
    const offset = (seek * TIME_PRECISION) / INPUT_STRIDE;
    const frames = Math.min(total - seek, windowFrames);
    const window = featureWindow(features, nMels, total, seek, frames, windowFrames);
    const forced = seek === 0 ? prefixIds : [];
    const input = prompt(segments, low, forced.length > 0);
    const { ids, measured } = await decodeTries(decodeWindow, window, input, forced, fallback, seek, vocabSize, eosId);
    low = measured.temperature < 0.5;
    windows.push(measured);
    if (measured.skipped) { // no segment, the next window
      seek += frames;
      continue;
    }
    const cut = splitSegments(ids, timestampBegin, offset, frames);
    seek += cut.advance > 0 ? cut.advance : frames; // a pair at <|0.00|> would decode the same window forever
    segments.push(...cut.segments.map((s) => ({ ...s, window: measured })));
  }
  return { ids: segments.flatMap((s) => s.tokens), segments, windows };
}

/** The window decoded at each temperature while `fallback` judges the try to need it (Python's _decode_tries):
 * { ids (the forced prefix first, EOS removed), measured (the kept try's window fields) }. */
async function decodeTries(decodeWindow, window, prompt, forced, fallback, seek, vocabSize, eosId) {
  let kept;
  for (const temperature of fallback.temperatures) {
    const row = await decodeWindow(window, [...prompt, ...forced], temperature, forced.length);
    const ids = [...forced, ...row.ids];
    const generated = row.ended ? [...ids, eosId] : ids;
    const ratio = compressionRatio(generated, vocabSize);
    const { needs, skip } = fallback.judge({ compressionRatio: ratio, avgLogprob: row.avgLogprob, noSpeechProb: row.noSpeechProb });
    const measured = { seek, temperature, avg_logprob: Number.isNaN(row.avgLogprob) ? null : row.avgLogprob,
      compression_ratio: ratio, no_speech_prob: row.noSpeechProb, skipped: skip };
    // what it read and generated, for word timestamps (speech/words.mjs), as Python's Window.prompt and ids
    Object.defineProperties(measured, { prompt: { value: row.prompt ?? prompt }, ids: { value: generated } });
    kept = { ids, measured };
    if (!needs) break;
  }
  return kept;
}

/** A window runner that decodes each window alone on `cache` (Python's cache_runner: decode/loop.mjs's run). */
export function cacheRunner(cache) {
  return (window, strategy) => run(cache, [window], strategy);
}

/** The decoding settings of one fallback try (Python's window_config): sampling at `temperature` > 0 (one beam),
 * else `config` as it is with temperature 1. */
export function windowConfig(config, temperature) {
  if (temperature > 0) return { ...config, doSample: true, temperature, numBeams: 1, numReturnSequences: 1 };
  return { ...config, doSample: false, temperature: 1 };
}

/**
 * `transcribeWindows`' `decodeWindow(window, prompt, temperature, forced)` over a window runner (Python's
 * window_decoder): one window, the Whisper strategy of `windowConfig(config, temperature)`, its best row
 * (speech/search.mjs's windowRow); the prompt's last `forced` ids are a prefix that Whisper's rules see as
 * generated. `onDetected(prompt)` gets a prompt whose language was detected.
 */
export function windowDecoder(runWindow, settings, config, { timestamps, max = null, maxTargetPositions, onDetected }) {
  return async (window, prompt, temperature = 0, forced = 0) => {
    const steps = maxNewTokens(settings, prompt.length, max, maxTargetPositions);
    const strategy = whisperStrategy(prompt, steps, settings, windowConfig(config, temperature), timestamps, { forced });
    await runWindow(window, strategy);
    const decoded = strategy.prompt.slice(0, prompt.length - forced); // its DETECT slot filled
    if (prompt.includes(DETECT)) onDetected(decoded);
    return { ...strategy.windowRow(), prompt: decoded }; // the alignment reads the detected language, as Python's
  };
}
