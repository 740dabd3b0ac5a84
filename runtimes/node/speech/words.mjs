// Word timestamps of a Whisper transcript: the port of tfm_export/runtime/speech/words.py. Each decoded
// window's tokens are timed by the export's alignment.onnx (speech/alignment.mjs's tokenTimes), then
// grouped into the words of each segment. Each window is encoded again (as openai-whisper's
// add_word_timestamps runs the model again): the alignment graph reads the window's decoder prompt and
// generated tokens in one pass, and the decode loop stays as it is.
// No Node APIs: the functions take the sessions and tokenizer they need.
import { tokenTimes, words } from './alignment.mjs';
import { FEATURE_PRECISION, featureWindow } from './longform.mjs';

/** The export's alignment.onnx session (opened once), or the one error saying why there is none. */
export async function alignmentSession(model) {
  if (!model.manifest.graphs.alignment || !model.extraSession) {
    throw new Error('this export has no alignment.onnx, which word timestamps need: export the Whisper folder again ' +
      'with this version (its generation_config.json must name alignment_heads)');
  }
  return model.extraSession('alignment');
}

/** The times of a window's generated ids (Python's window_times, from the window's start). */
export async function timeWindow(ort, model, session, layout, window, crop) {
  const { features, nMels, total, windowFrames } = layout;
  const part = featureWindow(features, nMels, total, window.seek, Math.min(total - window.seek, windowFrames),
    windowFrames);
  const encoded = await model.encoder.run({ [model.encoder.inputNames[0]]: new ort.Tensor('float32', part,
    [1, nMels, windowFrames]) });
  const ids = [...window.prompt, ...window.ids.slice(0, -1)];
  const feeds = { ...encoded, input_ids: new ort.Tensor('int64', BigInt64Array.from(ids, BigInt), [1, ids.length]) };
  const out = await session.run(Object.fromEntries(session.inputNames.map((name) => [name, feeds[name]])));
  const [, heads, rows, cols] = out.alignment.dims;
  const skip = window.prompt.length * cols; // the prompt's rows, per head
  const kept = new Float32Array(heads * (rows - window.prompt.length) * cols);
  for (let h = 0; h < heads; h++) {
    kept.set(out.alignment.data.subarray(h * rows * cols + skip, (h + 1) * rows * cols),
      h * (rows - window.prompt.length) * cols);
  }
  return tokenTimes(kept, heads, rows - window.prompt.length, cols, crop);
}

/** Where each token of each segment is in its window's ids (Python's words._positions). */
function positions(ids, segments) {
  let cursor = 0;
  return segments.map((segment) => segment.tokens.map((token) => {
    while (cursor < ids.length && ids[cursor] !== token) cursor += 1;
    const at = Math.min(cursor, ids.length - 1);
    cursor += 1;
    return at;
  }));
}

function segmentWords(decode, eosId, segment, where, times, language) {
  const kept = segment.tokens.map((t, k) => [where[k], t]).filter(([, t]) => t < eosId);
  if (!kept.length) return [];
  const last = kept[kept.length - 1][0];
  let after = times[Math.min(last + 1, times.length - 1)];
  if (after <= times[last]) after = Math.max(after, segment.end); // EOS repeats the last token's time
  return words(decode, kept.map(([, t]) => t), [...kept.map(([p]) => times[p]), after], eosId, language);
}

/**
 * The words of each segment (Python's add_words): `timeWindow(window, frames)` -> the times of the
 * window's generated ids; `audioFrames` the recording's own frames (the alignment reads no padding).
 */
export async function addWords({ segments, windows, windowFrames, audioFrames, decode, eosId, language },
  timeWindow) {
  const found = segments.map(() => []);
  for (const window of windows) {
    const members = segments.flatMap((s, n) => (s.window === window ? [n] : []));
    if (!members.length) continue;
    const frames = Math.min(audioFrames - window.seek, windowFrames);
    const times = (await timeWindow(window, frames)).map((t) => t + window.seek * FEATURE_PRECISION);
    const ofWindow = members.map((n) => segments[n]);
    positions(window.ids, ofWindow).forEach((where, k) => {
      found[members[k]] = segmentWords(decode, eosId, ofWindow[k], where, times, language);
    });
  }
  return found;
}
