// The page: load /export/ (manifest, hashes, graphs) with onnxruntime-web (WASM), translate lines.
import * as ort from '/ort/ort.wasm.min.mjs';
import { generateIds, makeTokenizer } from '/core/greedy.mjs';

ort.env.wasm.wasmPaths = '/ort/';
ort.env.wasm.numThreads = 1; // threads need cross-origin isolation; one is plenty for small models

const $ = (id) => document.getElementById(id);

async function sha256(bytes) {
  const digest = await crypto.subtle.digest('SHA-256', bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, '0')).join('');
}

async function openExport(base) {
  const manifest = await (await fetch(`${base}/manifest.json`)).json();
  const model = { manifest, tokenizer: makeTokenizer(manifest.tokenizer) };
  for (const name of ['encoder', 'decoder']) {
    const graph = manifest.graphs[name];
    const bytes = await (await fetch(`${base}/${graph.file}`)).arrayBuffer();
    if ((await sha256(bytes)) !== graph.sha256) throw new Error(`${graph.file} does not match manifest.json`);
    model[name] = await ort.InferenceSession.create(new Uint8Array(bytes), { executionProviders: ['wasm'] });
  }
  return model;
}

async function translate(model, texts) {
  const rows = [];
  for (const text of texts) {
    const times = [];
    const [ids] = await generateIds(ort, model, [model.tokenizer.encode(text)], { onStep: (ms) => times.push(ms) });
    const later = times.slice(1).sort((a, b) => a - b);
    const perToken = later.length ? later[Math.floor(later.length / 2)] : times[0];
    rows.push({ input: text, output: model.tokenizer.decode(ids), ids, msPerToken: perToken });
  }
  return rows;
}

function show(rows) {
  $('results').replaceChildren(...rows.map((r) => {
    const tr = document.createElement('tr');
    for (const value of [r.input, r.output, r.msPerToken.toFixed(2)]) {
      const td = document.createElement('td');
      td.textContent = value;
      tr.append(td);
    }
    return tr;
  }));
}

try {
  const model = await openExport('/export');
  const samples = model.manifest.samples ?? [];
  $('source').value = samples.join('\n');
  $('status').textContent = `ready: ${model.manifest.config.d_model}-wide model, ${samples.length} samples`;
  $('translate').disabled = false;
  $('translate').addEventListener('click', async () => {
    $('status').textContent = 'translating…';
    try {
      const texts = $('source').value.split('\n').map((t) => t.trim()).filter(Boolean);
      const rows = await translate(model, texts);
      show(rows);
      window.tfmResults = rows;
      $('status').textContent = `done: ${rows.length} translated`;
    } catch (err) {
      $('status').textContent = `error: ${err.message}`;
    }
  });
  window.tfmReady = true;
} catch (err) {
  $('status').textContent = `error: ${err.message}`;
  window.tfmError = err.message;
}
