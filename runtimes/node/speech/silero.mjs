// Silero VAD's model: P(speech) of each 32 ms window of a 16 kHz recording, the port of
// tfm_export/runtime/speech/silero.py. models/silero-vad's silero_vad_16k_op15_batched.onnx (MIT: the op15 file with
// the windows on its LSTM's sequence axis, tools/vad_batched.py) run as Python runs it: 512-sample windows at
// 16 kHz, each with the 64 samples before it prepended, up to 10,000 a call, the recurrent state carried from
// window to window and call to call, one thread. `ort` is onnxruntime-node or onnxruntime-web (the page passes its
// own); `model` the ONNX file's path (Node), URL or bytes. No Node APIs here; speech/vad.mjs makes the spans.

export const RATE = 16000; // Hz: the model's (and Whisper's) rate
export const WINDOW = 512; // samples per speech probability (32 ms)
export const CONTEXT = 64; // samples of the window before, prepended to each window
export const MODEL_FILE = 'silero_vad_16k_op15_batched.onnx'; // tools/vad_batched.py's: many windows a call
export const CALL_WINDOWS = 10000; // windows per model call (Python's)
const STATE = [2, 1, 128];

/** The model's session on one thread (CPU / WASM), as Python's vad_session. */
export async function vadSession(ort, model) {
  return ort.InferenceSession.create(model, { intraOpNumThreads: 1, interOpNumThreads: 1, graphOptimizationLevel: 'all' });
}

/** Float32Array: P(speech) of each 512-sample window (the last zero-padded), each run with the 64 samples before
 * it (zeros before the first) and the state the window before left. */
export async function speechProbabilities(ort, session, samples) {
  const count = Math.ceil(samples.length / WINDOW);
  const windows = new Float32Array(count * WINDOW);
  windows.set(samples);
  const state = new ort.Tensor('float32', new Float32Array(STATE[0] * STATE[1] * STATE[2]), STATE);
  return (await windowProbabilities(ort, session, windows, new Float32Array(CONTEXT), state)).probs;
}

/** { probs, state }: P(speech) of consecutive 512-sample windows of one stream (`windows`: their samples end to
 * end) and the state (a tensor) after the last; `context` the 64 samples before the first window (zeros at the
 * stream's start), `state` the one the window before left. Up to CALL_WINDOWS windows a call, as Python's. */
export async function windowProbabilities(ort, session, windows, context, state) {
  const count = windows.length / WINDOW;
  const size = CONTEXT + WINDOW;
  const inputs = new Float32Array(count * size);
  for (let i = 0; i < count; i += 1) {
    inputs.set(i ? windows.subarray(i * WINDOW - CONTEXT, i * WINDOW) : context, i * size);
    inputs.set(windows.subarray(i * WINDOW, (i + 1) * WINDOW), i * size + CONTEXT);
  }
  const probs = new Float32Array(count);
  for (let start = 0; start < count; start += CALL_WINDOWS) {
    const n = Math.min(CALL_WINDOWS, count - start);
    const input = new ort.Tensor('float32', inputs.slice(start * size, (start + n) * size), [n, size]);
    const result = await session.run({ input, state });
    probs.set(result.output.data, start);
    state = result.stateN;
  }
  return { probs, state };
}
