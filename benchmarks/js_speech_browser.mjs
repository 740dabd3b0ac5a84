// Browser timing server for js_speech.py (#43): headless Chromium, our page and transformers.js side by side.
//
//   node benchmarks/js_speech_browser.mjs --export OUR_EXPORT --tjs-model MODEL_DIR --tjs /work/tjs \
//       [--python PYTHON] [--chromium /usr/bin/chromium]
//
// ours: the page itself (runtimes/web, `tfm-export serve-web OUR_EXPORT`, as runtimes/web/test/harness.mjs
// starts it): a WAV file chosen with its file input is transcribed by speech-page.mjs, which times the
// transcription of the samples (window.tfmTranscript.ms: not the reading of the file). tjs: a page on the same
// origin (served by Playwright routes: js_speech_page.mjs, transformers.js' web build from --tjs, the Optimum
// export MODEL_DIR, the WAV files) running transformers.js' pipeline on the page's onnxruntime-web (/ort/, the
// same build and version) with the same single WASM thread, timed in the page around the pipeline call.
// Load: from navigation until the page is ready to transcribe (our page: the export opened, its sha256
// checked; theirs: the pipeline loaded), timed here.
// It prints {"ready": true, "load_s": {"ours": s, "tjs": s}}, then answers JSON lines on stdin:
//   {"mode": "ours" | "tjs", "wav": PATH, "language": "en", "max_new_tokens": n or null}
//   -> {"seconds": s, "text": "...", "ids": [...]}   (our page takes the folder's max_length: n must be null)
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { closeAll, launchChromium, openPage, startServeWeb } from '../runtimes/web/test/harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values } = parseArgs({ options: { export: { type: 'string' }, 'tjs-model': { type: 'string' },
  tjs: { type: 'string' }, python: { type: 'string', default: 'python3' },
  chromium: { type: 'string', default: '/usr/bin/chromium' } } });
const TYPES = { '.mjs': 'text/javascript', '.js': 'text/javascript', '.json': 'application/json' };
const wavs = []; // the files the tjs page may fetch: /tjs-bench/wav/<index>.wav

/** The tjs page's files: its HTML (the import map), the module, transformers.js, the model, the WAV files. */
function tjsFile(rest) {
  if (rest.startsWith('model/m/')) return path.join(values['tjs-model'], rest.slice('model/m/'.length));
  if (rest.startsWith('wav/')) return wavs[Number.parseInt(rest.slice(4), 10)];
  const web = path.join(values.tjs, 'node_modules/@huggingface/transformers/dist/transformers.web.js');
  return { 'bench.mjs': path.join(here, 'js_speech_page.mjs'), 'transformers.web.js': web }[rest];
}

const HTML = `<!doctype html><html><head><meta charset="utf-8"><link rel="icon" href="data:,">
<script type="importmap">{ "imports": { "onnxruntime-web/webgpu": "/ort/ort.wasm.min.mjs",
  "onnxruntime-common": "/ort/ort.wasm.min.mjs", "wavefile": "/wavefile-shim.mjs" } }</script>
</head><body><script type="module" src="/tjs-bench/bench.mjs"></script></body></html>`;

async function routeTjs(context, origin) {
  await context.route(`${origin}tjs-bench/**`, async (route) => {
    const rest = decodeURIComponent(new URL(route.request().url()).pathname.slice('/tjs-bench/'.length));
    if (rest === '' || rest === 'index.html') return route.fulfill({ body: HTML, contentType: 'text/html' });
    const file = tjsFile(rest);
    let body;
    try { body = file && readFileSync(file); } catch { body = null; }
    if (!body) return route.fulfill({ status: 404, body: `not found: ${rest}` });
    return route.fulfill({ body, contentType: TYPES[path.extname(file)] ?? 'application/octet-stream' });
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
  page.on('response', (res) => { if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`); });
  await page.goto(`${url}tjs-bench/`);
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
  const url = `/tjs-bench/wav/${wavs.indexOf(wav)}.wav`;
  const { ms, text, ids } = await page.evaluate(([u, l, n]) => window.tjsBench(u, l, n), [url, language, maxNewTokens]);
  return { seconds: ms / 1000, text, ids };
}

let context;
try {
  const { url } = await startServeWeb(values.python, values.export);
  context = await launchChromium(values.chromium);
  await routeTjs(context, url);
  const problems = [];
  const ours = await timedOpen(() => openPage(context, url, problems));
  const tjs = await timedOpen(() => openTjs(context, url, problems));
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
  await closeAll(context);
}
