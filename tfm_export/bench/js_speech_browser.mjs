// Browser timing server for js_speech.py (#43): headless Chromium, our page and transformers.js side by side.
//
//   node tfm_export/bench/js_speech_browser.mjs --export OUR_EXPORT --tjs-model MODEL_DIR --tjs /work/tjs \
//       [--python PYTHON] [--chromium /usr/bin/chromium]
//
// ours: the page itself (runtimes/web, `tfm-export serve-web OUR_EXPORT`, as runtimes/web/test/harness.mjs
// starts it): a WAV file chosen with its file input is transcribed by speech-page.mjs, which times the
// transcription of the samples (window.tfmTranscript.ms: not the reading of the file). tjs: a page of its own
// (PAGE) on a loopback server of this script's (tfm-export serve-web checks for a manifest.json, which Optimum's export
// has not; Playwright routes cannot carry the graphs: a route's body goes through the DevTools pipe, at most
// 100 MB), with serve-web's mounts (/ort/ from runtimes/web's onnxruntime-web: the same build and version as
// our page's; /lib/ from runtimes/node; the wavefile shim) and the Optimum export MODEL_DIR at /export/, running
// transformers.js' web build (from --tjs) with the same single WASM thread, timed in the page around the
// pipeline call.
// Load: from navigation until the page is ready to transcribe (our page: the export opened, its sha256
// checked; theirs: the pipeline loaded), timed here.
// It prints {"ready": true, "load_s": {"ours": s, "tjs": s}}, then answers JSON lines on stdin:
//   {"mode": "ours" | "tjs", "wav": PATH, "language": "en", "max_new_tokens": n or null}
//   -> {"seconds": s, "text": "...", "ids": [...]}   (our page takes the folder's max_length: n must be null)
import { createReadStream } from 'node:fs';
import { createServer } from 'node:http';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { closeAll, launchChromium, openPage, startServeWeb } from '../../runtimes/web/test/harness.mjs';
import { tjsTranscriber } from './js_speech_node.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const runtimes = path.join(here, '..', '..', 'runtimes'); // the checkout's: this file is in tfm_export/bench/
const { values } = parseArgs({ options: { export: { type: 'string' }, 'tjs-model': { type: 'string' },
  tjs: { type: 'string' }, python: { type: 'string', default: 'python3' },
  chromium: { type: 'string', default: '/usr/bin/chromium' } } });
const TYPES = { '.mjs': 'text/javascript', '.js': 'text/javascript', '.json': 'application/json',
  '.wasm': 'application/wasm', '.html': 'text/html' };
const wavs = []; // the files the tjs page may fetch: /wav/<index>.wav

// URL prefix -> folder, as tfm-export serve-web mounts them (tfm_export/serve/web.py), for the tjs page
const MOUNTS = {
  '/export/': values['tjs-model'],
  '/ort/': path.join(runtimes, 'web/node_modules/onnxruntime-web/dist'),
  '/lib/': path.join(runtimes, 'node'),
  '/npm/wavefile/': path.join(runtimes, 'node/node_modules/wavefile/dist'),
  '/tjs/': path.join(values.tjs, 'node_modules/@huggingface/transformers/dist'),
  '/': path.join(runtimes, 'web'), // wavefile-shim.mjs, commonjs.mjs
};

const HTML = `<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{ "imports": { "onnxruntime-web/webgpu": "/ort/ort.wasm.min.mjs",
  "onnxruntime-common": "/ort/ort.wasm.min.mjs", "wavefile": "/wavefile-shim.mjs" } }</script>
</head><body><script type="module" src="/bench.mjs"></script></body></html>`;

// The tjs page's module (/bench.mjs), on this script's loopback server with tfm-export serve-web's mounts, so
// that it imports onnxruntime-web from /ort/ (the page's own build and version, 1 WASM thread as the page: app.mjs) and
// the WAV reader from /lib/audio/io.mjs (Node's, as the page reads a WAV file: the same samples for both).
// transformers.js (its web build, /tjs/transformers.web.js) gets that onnxruntime-web through the page's
// import map, and the Optimum export as the model "export" under / (served at /export/;
// env.allowRemoteModels = false; localModelPath must be a path: transformers.js takes a URL for a remote file).
// window.tjsReady (or window.tjsError) once the pipeline is loaded; window.tjsBench(wavUrl, language,
// maxNewTokens) -> { ms, text, ids } transcribes the file's samples (read once, not timed).
// tjsTranscriber is js_speech_node.mjs's, its source put in the module: one transcriber for Node and the page.
const PAGE = `import * as ort from '/ort/ort.wasm.min.mjs';
import { readWav } from '/lib/audio/io.mjs';

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

open().then(() => { window.tjsReady = true; }, (err) => { window.tjsError = \`\${err.name}: \${err.message}\`; });

${tjsTranscriber.toString()}
`;

/** The file behind a URL path of the tjs page, or null. */
function tjsFile(urlPath) {
  if (urlPath.startsWith('/wav/')) return wavs[Number.parseInt(urlPath.slice(5), 10)] ?? null;
  const prefix = Object.keys(MOUNTS).find((p) => urlPath.startsWith(p));
  const root = path.resolve(MOUNTS[prefix]);
  const file = path.resolve(root, urlPath.slice(prefix.length));
  return file.startsWith(`${root}${path.sep}`) ? file : null;
}

/** The tjs page's server on a free loopback port; resolves with { server, url }. */
function serveTjs() {
  const server = createServer((req, res) => {
    const urlPath = decodeURIComponent(new URL(req.url, 'http://x').pathname);
    if (urlPath === '/') return res.writeHead(200, { 'Content-Type': 'text/html' }).end(HTML);
    if (urlPath === '/bench.mjs') return res.writeHead(200, { 'Content-Type': 'text/javascript' }).end(PAGE);
    const file = tjsFile(urlPath);
    const notFound = () => res.writeHead(404).end();
    if (!file) return notFound();
    return createReadStream(file).on('error', notFound).on('open', () => res.writeHead(200,
      { 'Content-Type': TYPES[path.extname(file)] ?? 'application/octet-stream', 'Cache-Control': 'no-store' }))
      .pipe(res);
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({ server, url: `http://127.0.0.1:${server.address().port}/` }));
  });
}

/** Page at `url` ready (`ready` true in the page), and the seconds from navigation to ready. */
async function timedOpen(open) {
  const start = performance.now();
  const page = await open();
  return { page, seconds: (performance.now() - start) / 1000 };
}

async function openTjs(context, url, problems) {
  const page = await context.newPage();
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console: ${msg.text()}`); });
  page.on('requestfailed', (req) => problems.push(`request failed: ${req.url()} ${req.failure()?.errorText}`));
  page.on('response', (res) => { if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`); });
  await page.goto(url);
  await page.waitForFunction(() => window.tjsReady || window.tjsError, null, { timeout: 600_000 });
  const error = await page.evaluate(() => window.tjsError ?? null);
  if (error) throw new Error(`transformers.js page: ${error} ${problems.join('; ')}`);
  return page;
}

/** One transcription on our page: the file chosen with its input, greedy, language given, no timestamps. */
async function runOurs(page, { wav, language, max_new_tokens: maxNewTokens }) {
  if (maxNewTokens) throw new Error("the page has no max_new_tokens: set the folder's max_length");
  await page.selectOption('#speech-lang', language);
  await page.fill('#speech-beams', '1');
  await page.setChecked('#speech-timestamps', false);
  await page.evaluate(() => { [window.tfmTranscript, window.tfmSpeechError] = [null, null]; });
  await page.setInputFiles('#audio-file', wav);
  await page.waitForFunction(() => window.tfmTranscript || window.tfmSpeechError, null, { timeout: 600_000 });
  const { result, error } = await page.evaluate(() => ({ result: window.tfmTranscript, error: window.tfmSpeechError }));
  if (error) throw new Error(error);
  return { seconds: result.ms / 1000, text: result.text, ids: result.ids };
}

async function runTjs(page, { wav, language, max_new_tokens: maxNewTokens }) {
  if (!wavs.includes(wav)) wavs.push(wav);
  const url = `/wav/${wavs.indexOf(wav)}.wav`;
  const { ms, text, ids } = await page.evaluate(([u, l, n]) => window.tjsBench(u, l, n), [url, language, maxNewTokens]);
  return { seconds: ms / 1000, text, ids };
}

let context;
let tjsServer;
try {
  const { url } = await startServeWeb(values.python, values.export);
  tjsServer = await serveTjs();
  context = await launchChromium(values.chromium);
  const problems = [];
  const ours = await timedOpen(() => openPage(context, url, problems));
  const tjs = await timedOpen(() => openTjs(context, tjsServer.url, problems));
  console.log(JSON.stringify({ ready: true, load_s: { ours: ours.seconds, tjs: tjs.seconds } }));
  const runs = { ours: (request) => runOurs(ours.page, request), tjs: (request) => runTjs(tjs.page, request) };
  for await (const line of createInterface({ input: process.stdin })) {
    let reply;
    try {
      const request = JSON.parse(line);
      reply = await runs[request.mode](request);
    } catch (err) {
      reply = { error: `${err.name}: ${err.message}` };
    }
    console.log(JSON.stringify(reply));
  }
} catch (err) {
  console.log(JSON.stringify({ error: `${err.name}: ${err.message}` }));
  process.exitCode = 1;
} finally {
  tjsServer?.server.close();
  await closeAll(context);
}
