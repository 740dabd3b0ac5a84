// The page: open an export folder served over HTTP with onnxruntime-web (WASM), translate lines
// (greedy, beam search or seeded sampling), show each translation as its tokens come (a stream) with
// its per-token latency. The decoding module is ../node/decoding.mjs, shared with Node.
// `tfm-export serve-web OUT` serves this folder at /, ../node/*.mjs at /lib/, onnxruntime-web's
// dist/ at /ort/ and OUT at /export/; `?export=URL` points the page elsewhere.
import * as ort from '/ort/ort.wasm.min.mjs';
import { checkManifest, generationConfig, graphFiles, makeTokenizer, stream } from '/lib/decoding.mjs';

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

/** A results row (input, output, tokens, ms / token); returns its cells. */
function addRow(input) {
  const tr = document.createElement('tr');
  const cells = ['', 'out', 'num', 'num'].map((cls) => {
    const td = document.createElement('td');
    td.className = cls;
    tr.append(td);
    return td;
  });
  cells[0].textContent = input;
  $('results').append(tr);
  return cells;
}

/** The decoding options of the form (checked: a bad value is a one-line error). */
function formOptions(model) {
  const options = { numBeams: Number($('beams').value), doSample: $('sample').checked };
  if (options.doSample) options.seed = Number($('seed').value);
  generationConfig(model.manifest, options);
  return options;
}

/** One text at a time, streamed into its row as the tokens come, so each row has its own latency. */
async function translate(model, texts, options) {
  const sources = texts.map((text) => model.tokenizer.encode(text)); // every line checked before any runs
  $('results').replaceChildren();
  const rows = [];
  for (const [n, text] of texts.entries()) {
    const cells = addRow(text);
    const timings = {};
    const ids = [];
    let pieces = 0;
    for await (const id of stream(ort, model, sources[n], { ...options, timings })) {
      ids.push(id);
      pieces += 1;
      cells[1].textContent = model.tokenizer.decode(ids);
      cells[2].textContent = ids.length;
    }
    const msPerToken = timings.stepsMs.reduce((a, b) => a + b, 0) / timings.stepsMs.length;
    cells[3].textContent = msPerToken.toFixed(2);
    rows.push({ input: text, output: model.tokenizer.decode(ids), ids, tokens: ids.length, pieces,
      steps: timings.stepsMs.length, encoderMs: timings.encoderMs, msPerToken });
  }
  return rows;
}

function describe(options) {
  if (options.numBeams > 1) return `beam search, ${options.numBeams} beams`;
  return options.doSample ? `sampling, seed ${options.seed}` : 'greedy';
}

async function onTranslate(model) {
  const texts = $('source').value.split('\n').map((t) => t.trim()).filter(Boolean);
  if (!texts.length) return setStatus('type at least one line', true);
  window.tfmResults = null;
  window.tfmLastError = null;
  $('translate').disabled = true;
  setStatus('translating…');
  try {
    const options = formOptions(model);
    const rows = await translate(model, texts, options);
    const steps = rows.reduce((n, r) => n + r.steps, 0);
    const mean = rows.reduce((t, r) => t + r.msPerToken * r.steps, 0) / steps;
    setStatus(`${rows.length} translated: ${mean.toFixed(2)} ms per token on average (${describe(options)}; WASM, 1 thread)`);
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
  $('beams').value = generationConfig(model.manifest).numBeams; // the export's default (a Marian folder's num_beams)
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
