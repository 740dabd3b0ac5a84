// transformers.js' side of js_speech.py's browser figure (#43): js_speech_browser.mjs serves this module as
// /bench.mjs on a loopback server of its own with tfm-export serve-web's mounts, so that it imports
// onnxruntime-web from /ort/ (the page's own build and version, 1 WASM thread as the page: app.mjs) and
// the WAV reader from /lib/audio/io.mjs (Node's, as the page reads a WAV file: the same samples for both).
// transformers.js (its web build, /tjs/transformers.web.js) gets that onnxruntime-web through the page's
// import map, and the Optimum export as the model "export" under / (served at /export/;
// env.allowRemoteModels = false; localModelPath must be a path: transformers.js takes a URL for a remote file).
// window.tjsReady (or window.tjsError) once the pipeline is loaded; window.tjsBench(wavUrl, language,
// maxNewTokens) -> { ms, text, ids } transcribes the file's samples (read once, not timed).
import * as ort from '/ort/ort.wasm.min.mjs';
import { readWav } from '/lib/audio/io.mjs';
import { tjsTranscriber } from '/tjs-run.mjs';

ort.env.wasm.wasmPaths = '/ort/'; // set before transformers.js loads: it would point an unset one at a CDN
ort.env.wasm.numThreads = 1; // the page's: threads need cross-origin isolation

const samples = {};

async function open() {
  const { env, pipeline } = await import('/tjs/transformers.web.js');
  Object.assign(env, { allowRemoteModels: false, allowLocalModels: true, localModelPath: '/',
    useBrowserCache: false, useWasmCache: false });
  const asr = await pipeline('automatic-speech-recognition', 'export', { dtype: 'fp32', device: 'wasm' });
  const transcribe = tjsTranscriber(asr);
  window.tjsBench = async (url, language, maxNewTokens) => {
    samples[url] ??= readWav(new Uint8Array(await (await fetch(url)).arrayBuffer()), 16000, url);
    return transcribe(samples[url], language, maxNewTokens);
  };
}

open().then(() => { window.tjsReady = true; }, (err) => { window.tjsError = `${err.name}: ${err.message}`; });
