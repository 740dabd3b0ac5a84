// The page: open an export folder served over HTTP with onnxruntime-web (WASM), translate lines,
// show each translation with its per-token latency. The decoding loop is ../node/greedy.mjs, shared
// with Node. `tfm-export serve-web OUT` serves this folder at /, ../node/greedy.mjs at /lib/,
// onnxruntime-web's dist/ at /ort/ and OUT at /export/; `?export=URL` points the page elsewhere.
import * as ort from '/ort/ort.wasm.min.mjs';
import { checkManifest, generateIds, graphFiles, makeTokenizer } from '/lib/greedy.mjs';

ort.env.wasm.wasmPaths = '/ort/'; // served locally: no CDN
ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; one is plenty for small models

const $ = (id) => document.getElementById(id);

function setStatus(text, isError = false) {
  $('status').textContent = text;
  $('status').className = isError ? 'error' : '';
}

async function fetchOk(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return res;
}

async function sha256(bytes) {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

/** manifest.json (checked), the graphs (sha256 checked) and one WASM session per graph. */
async function openExport(base) {
  const manifest = checkManifest(await (await fetchOk(`${base}/manifest.json`)).json(), `${base}/manifest.json`);
  const model = { manifest, tokenizer: makeTokenizer(manifest.tokenizer) };
  if (!model.tokenizer) throw new Error('this export has no tokenizer; the page needs one to encode text');
  for (const name of ['encoder', 'decoder']) {
    const graph = manifest.graphs[name];
    if (Object.keys(graphFiles(graph)).length > 1) {
      throw new Error(`${graph.file} keeps its weights in external data files (a model over 2 GB): too big for the browser`);
    }
    const bytes = new Uint8Array(await (await fetchOk(`${base}/${graph.file}`)).arrayBuffer());
    if ((await sha256(bytes)) !== graph.sha256) {
      throw new Error(`${graph.file} does not match the sha256 in manifest.json; re-run the export`);
    }
    model[name] = await ort.InferenceSession.create(bytes, { executionProviders: ['wasm'] });
  }
  return model;
}

/** One text at a time, so each row has its own latency. */
async function translate(model, texts) {
  const rows = [];
  for (const text of texts) {
    const timings = {};
    const [ids] = await generateIds(ort, model, [model.tokenizer.encode(text)], { timings });
    const decodeMs = timings.stepsMs.reduce((a, b) => a + b, 0);
    rows.push({ input: text, output: model.tokenizer.decode(ids), ids, tokens: ids.length,
      encoderMs: timings.encoderMs, msPerToken: decodeMs / timings.stepsMs.length });
  }
  return rows;
}

function show(rows) {
  $('results').replaceChildren(...rows.map((r) => {
    const tr = document.createElement('tr');
    for (const [value, cls] of [[r.input, ''], [r.output, 'out'], [r.tokens, 'num'], [r.msPerToken.toFixed(2), 'num']]) {
      const td = document.createElement('td');
      td.textContent = value;
      td.className = cls;
      tr.append(td);
    }
    return tr;
  }));
}

async function onTranslate(model) {
  const texts = $('source').value.split('\n').map((t) => t.trim()).filter(Boolean);
  if (!texts.length) return setStatus('type at least one line', true);
  window.tfmResults = null;
  window.tfmLastError = null;
  $('translate').disabled = true;
  setStatus('translating…');
  try {
    const rows = await translate(model, texts);
    show(rows);
    const steps = rows.reduce((n, r) => n + r.tokens + 1, 0);
    const mean = rows.reduce((t, r) => t + r.msPerToken * (r.tokens + 1), 0) / steps;
    setStatus(`${rows.length} translated: ${mean.toFixed(2)} ms per token on average (WASM, 1 thread)`);
    window.tfmResults = rows;
  } catch (err) {
    setStatus(`error: ${err.message}`, true);
    window.tfmLastError = err.message;
  } finally {
    $('translate').disabled = false;
  }
}

const base = new URLSearchParams(location.search).get('export') ?? '/export';
try {
  const model = await openExport(base.replace(/\/$/, ''));
  const c = model.manifest.config;
  $('source').value = (model.manifest.samples ?? []).slice(0, 4).join('\n');
  const v = model.manifest.variant;
  const variant = [v.dtype, v.quantize, v.optimized && 'optimized'].filter(Boolean).join(', ');
  setStatus(`ready: ${base} (${variant}; d_model ${c.d_model}, ${c.n_encoder_layers}+${c.n_decoder_layers} layers, ` +
    `max_len ${c.max_len}); knows ${JSON.stringify(model.manifest.tokenizer.src_vocab.slice(model.manifest.tokenizer.specials ?? 3).join(''))}`);
  $('translate').disabled = false;
  $('translate').addEventListener('click', () => onTranslate(model));
  $('source').addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) onTranslate(model); });
  window.tfmReady = true;
} catch (err) {
  setStatus(`error: ${err.message}`, true);
  window.tfmError = err.message;
}
