// Node timing server for js_speech.py (#43): one Whisper model in one Node process, ours or transformers.js; and
// transformers.js' transcriber (tjsTranscriber), which js_speech_browser.mjs's page runs too.
//
//   node tfm_export/bench/js_speech_node.mjs ours EXPORT_DIR --threads N
//   node tfm_export/bench/js_speech_node.mjs tjs MODEL_DIR --threads N --tjs /work/tjs
//
// ours: runtimes/node's openExport(EXPORT_DIR) (sha256 of every file checked, as a user opens it) and its
// transcribe; tjs: transformers.js' pipeline('automatic-speech-recognition', MODEL_DIR) with
// env.allowRemoteModels = false, dtype fp32, device cpu (onnxruntime-node), from the folder --tjs where
// @huggingface/transformers is installed (a benchmark-only package: not a dependency of runtimes/). Both get
// a SessionOptions of --threads intra-op threads and 1 inter-op thread.
// It prints {"ready": true, "load_s": s} (opening the model, timed here), then answers JSON lines on stdin:
//   {"wav": PATH, "language": "en", "max_new_tokens": n or null}
//   -> {"seconds": s, "text": "...", "ids": [...]}  (the generated ids, without the prompt and EOS)
// The WAV file is read once (runtimes/node/audio/io.mjs: the same float32 samples for both) and not timed:
// `seconds` is the transcription of the samples (features, encoder, decoder steps, the text).
// max_new_tokens null: each side's default from the folder's generation_config (max_length).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

// this file sits in tfm_export/bench/, beside the other peers' backends: the checkout's runtimes/ is two up
const NODE_RUNTIME = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'runtimes', 'node');

/** ours: { load, run(samples, language, maxNewTokens) -> { text, ids } } */
async function ours({ dir, sessionOptions }) {
  const { openExport } = await import(pathToFileURL(path.join(NODE_RUNTIME, 'exported.mjs')).href);
  const model = await openExport(dir, { sessionOptions });
  return async (samples, language, maxNewTokens) => {
    const options = { language, task: 'transcribe', numBeams: 1, timestamps: false };
    if (maxNewTokens) options.maxNewTokens = maxNewTokens;
    const { text, ids } = await model.transcribe(samples, options);
    return { text, ids };
  };
}

/** transformers.js' pipeline on the folder; the ids are taken from its model.generate (wrapped). */
async function theirs({ dir, sessionOptions, tjs }) {
  const module = path.join(tjs, 'node_modules', '@huggingface', 'transformers', 'dist', 'transformers.node.mjs');
  const { env, pipeline } = await import(pathToFileURL(module).href);
  Object.assign(env, { allowRemoteModels: false, allowLocalModels: true, useFSCache: false,
    localModelPath: `${path.dirname(path.resolve(dir))}/` });
  const asr = await pipeline('automatic-speech-recognition', path.basename(path.resolve(dir)),
    { dtype: 'fp32', device: 'cpu', session_options: sessionOptions });
  return tjsTranscriber(asr);
}

/** asr: a transformers.js automatic-speech-recognition pipeline -> async (samples, language, maxNewTokens)
 *  -> { ms, text, ids }; ms times the pipeline's call on the samples (features, encoder, decoder, text). */
export function tjsTranscriber(asr) {
  // No import or outer name in here: js_speech_browser.mjs serves this function's source to its page.
  const generate = asr.model.generate.bind(asr.model);
  let sequence = null;
  asr.model.generate = async (args) => {
    const out = await generate(args);
    sequence = out.tolist()[0].map(Number);
    return out;
  };
  const config = asr.model.generation_config;
  return async (samples, language, maxNewTokens) => {
    const options = { language, task: 'transcribe', return_timestamps: false };
    if (maxNewTokens) options.max_new_tokens = maxNewTokens;
    const start = performance.now();
    const { text } = await asr(samples, options);
    const ms = performance.now() - start;
    const prompt = asr.model._retrieve_init_tokens({ ...config, language, task: 'transcribe',
      return_timestamps: false });
    const ids = sequence.slice(prompt.length);
    if (ids.at(-1) === config.eos_token_id) ids.pop();
    return { ms, text, ids };
  };
}

/** The worker: open the model, print the ready line, answer JSON lines. */
async function main() {
  const { values, positionals: [side, dir] } = parseArgs({
    allowPositionals: true, options: { threads: { type: 'string', default: '1' }, tjs: { type: 'string' } },
  });
  const sessionOptions = { intraOpNumThreads: Number(values.threads), interOpNumThreads: 1 };
  const { readWav } = await import(pathToFileURL(path.join(NODE_RUNTIME, 'audio', 'io.mjs')).href);
  const start = performance.now();
  const run = await ({ ours, tjs: theirs })[side]({ dir, sessionOptions, tjs: values.tjs });
  console.log(JSON.stringify({ ready: true, load_s: (performance.now() - start) / 1000 }));
  const samples = {};
  for await (const line of createInterface({ input: process.stdin })) {
    let reply;
    try {
      const request = JSON.parse(line);
      samples[request.wav] ??= readWav(readFileSync(request.wav), 16000, request.wav);
      const begin = performance.now();
      const { text, ids } = await run(samples[request.wav], request.language, request.max_new_tokens);
      reply = { seconds: (performance.now() - begin) / 1000, text, ids };
    } catch (err) {
      reply = { error: `${err.name}: ${err.message}` };
    }
    console.log(JSON.stringify(reply));
  }
}

// Run as a script (js_speech.py's worker); imported (js_speech_browser.mjs: tjsTranscriber), it only defines.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
