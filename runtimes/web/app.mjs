// The page: open an export folder served over HTTP with onnxruntime-web (WASM), translate lines
// (greedy, beam search or seeded sampling), show each translation as its tokens come (a stream) with
// its per-token latency. The decoding module is ../node/decoding.mjs, shared with Node.
// Or, "on a server": send the lines to a `tfm-export serve` (../node/client.mjs, Node's client) and
// show its streamed tokens; that server must allow this page's origin (--cors-origin).
// Text goes through the export's tokenizer (../node/tokenizers.mjs: its vocabulary, or its
// tokenizer.json with @huggingface/tokenizers); a multilingual export shows language selectors.
// `tfm-export serve-web OUT` serves this folder at /, ../node/*.mjs at /lib/, onnxruntime-web's
// dist/ at /ort/, @huggingface/tokenizers' dist/ at /tokenizers/ (index.html's import map) and OUT
// at /export/; `?export=URL` points the page elsewhere, `?server=URL` starts it on that server.
import * as ort from '/ort/ort.wasm.min.mjs';
import { connect } from '/lib/client.mjs';
import { checkManifest, generationConfig, graphFiles, runtimeGraphs, stream } from '/lib/decoding.mjs';
import { DEFAULTS } from '/lib/options.mjs';
import { languageCodes, languageOptions, makeTokenizer, tokenizerFiles } from '/lib/tokenizers.mjs';

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

/** The manifest's tokenizer with its files (tokenizer.json), each checked against the sha256 in `files`. */
async function openTokenizer(base, manifest) {
  const files = {};
  for (const name of tokenizerFiles(manifest.tokenizer)) {
    const bytes = new Uint8Array(await (await fetchOk(`${base}/${name}`)).arrayBuffer());
    const expected = manifest.files?.[name]; // exports from before `files` record none
    if (expected && (await sha256(bytes)) !== expected) {
      throw new Error(`${name} does not match the sha256 in manifest.json; re-run the export`);
    }
    files[name] = JSON.parse(new TextDecoder().decode(bytes));
  }
  const tokenizer = makeTokenizer(manifest.tokenizer, files);
  if (!tokenizer) throw new Error('this export has no tokenizer; the page needs one to encode text');
  if (tokenizer.idsOnly) {
    throw new Error(`the page cannot encode text with a "${tokenizer.kind}" tokenizer (only "chars" and "hf"); ` +
      'use `tfm-export serve` and "Run on a server"');
  }
  return tokenizer;
}

/** manifest.json (checked), its tokenizer, the graphs (sha256 checked) and one WASM session per graph. */
async function openExport(base) {
  const manifest = checkManifest(await (await fetchOk(`${base}/manifest.json`)).json(), `${base}/manifest.json`);
  const graphs = runtimeGraphs(manifest); // a module export's decoder is decoder_nocache.onnx
  if (!graphs.decoder) throw new Error('this export is encoder-only (it has no decoder): the page translates; run it in Node or Python');
  const model = { manifest, tokenizer: await openTokenizer(base, manifest) };
  for (const [role, name] of Object.entries(graphs)) {
    const graph = manifest.graphs[name];
    if (Object.keys(graphFiles(graph)).length > 1) {
      throw new Error(`${graph.file} keeps its weights in external data files (a model over 2 GB): too big for the browser`);
    }
    const bytes = new Uint8Array(await (await fetchOk(`${base}/${graph.file}`)).arrayBuffer());
    if ((await sha256(bytes)) !== graph.sha256) {
      throw new Error(`${graph.file} does not match the sha256 in manifest.json; re-run the export`);
    }
    model[role] = await ort.InferenceSession.create(bytes, { executionProviders: ['wasm'] });
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
  generationConfig(model?.manifest, options);
  return options;
}

/** The language selectors' codes (none when hidden, or "(none)" chosen): { sourceLang, targetLang }. */
function formLanguages() {
  if ($('languages').hidden) return {};
  const chosen = (id) => $(id).value || undefined;
  return { sourceLang: chosen('source-lang'), targetLang: chosen('target-lang') };
}

function fillSelect(select, codes, selected, empty) {
  const choices = empty ? [['', empty], ...codes.map((c) => [c, c])] : codes.map((c) => [c, c]);
  select.replaceChildren(...choices.map(([value, label]) => new Option(label, value, false, value === selected)));
}

/** Language selectors for an export whose tokenizer has codes (the source preselects its default). */
function showLanguages(manifest) {
  const codes = languageCodes(manifest.tokenizer);
  $('languages').hidden = !codes.source.length && !codes.target.length;
  fillSelect($('source-lang'), codes.source, codes.sourceDefault ?? '', codes.sourceDefault ? null : '(none)');
  fillSelect($('target-lang'), codes.target, '', "(the model's choice)");
}

/** What the server is asked for: the options that are not greedy's (a server's export may have its own defaults). */
const serverOptions = (options) => Object.fromEntries(Object.entries(options).filter(([k, v]) => v !== DEFAULTS[k]));

/** One text at a time, streamed into its row as the tokens come, so each row has its own latency. */
async function translate(model, texts, options, { sourceLang, targetLang }) {
  // every line checked before any runs; the target language is the forced first token
  const sources = texts.map((text) => model.tokenizer.encode(text, sourceLang, targetLang));
  const decoding = { ...languageOptions(model.tokenizer, targetLang), ...options };
  $('results').replaceChildren();
  const rows = [];
  for (const [n, text] of texts.entries()) {
    const cells = addRow(text);
    const timings = {};
    const ids = [];
    let pieces = 0;
    for await (const id of stream(ort, model, sources[n], { ...decoding, timings })) {
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

/** All lines in one streamed request; each row shows its tokens as they arrive, then the final text. */
async function translateOnServer(server, texts, options, languages) {
  $('results').replaceChildren();
  const rows = texts.map((input) => ({ input, cells: addRow(input), output: '', ids: [], pieces: 0, arrivedMs: 0 }));
  const show = (row) => { row.cells[1].textContent = row.output; row.cells[2].textContent = row.ids.length; };
  const started = performance.now();
  for await (const event of server.streamEvents(texts, { ...serverOptions(options), ...languages })) {
    if (event.type === 'token') {
      const row = rows[event.index];
      Object.assign(row, { output: row.output + (event.text ?? ''), arrivedMs: performance.now() - started });
      row.ids.push(event.id);
      row.pieces += 1;
      show(row);
    } else { // done: the translations (beam search: its best hypotheses, which only now are known)
      for (const [n, { ids, text }] of event.translations.entries()) {
        const arrivedMs = rows[n].arrivedMs || performance.now() - started;
        Object.assign(rows[n], { ids, output: text ?? '', arrivedMs });
        show(rows[n]);
      }
    }
  }
  return rows.map(({ cells, arrivedMs, ...row }) => {
    const msPerToken = arrivedMs / Math.max(1, row.ids.length);
    cells[3].textContent = msPerToken.toFixed(2);
    return { ...row, tokens: row.ids.length, msPerToken };
  });
}

function describe(options) {
  if (options.numBeams > 1) return `beam search, ${options.numBeams} beams`;
  return options.doSample ? `sampling, seed ${options.seed}` : 'greedy';
}

/** The status line after a translation: the mean per token, over decoder steps (here) or tokens (server). */
function summary(rows, options, server) {
  const weight = (row) => (server ? row.tokens : row.steps);
  const mean = rows.reduce((t, r) => t + r.msPerToken * weight(r), 0) / rows.reduce((n, r) => n + weight(r), 0);
  const where = server ? `server ${server.url}, as received` : 'WASM, 1 thread';
  return `${rows.length} translated: ${mean.toFixed(2)} ms per token on average (${describe(options)}; ${where})`;
}

const params = new URLSearchParams(location.search);
const base = (params.get('export') ?? '/export').replace(/\/$/, '');
let opened; // the local model (a promise), opened the first time the page runs in this browser
let turns = 0; // the latest prepare() wins when the mode changes quickly

const onServer = () => document.querySelector('input[name=mode]:checked').value === 'server';

/** Where the lines go: { model } (this browser) or { server } (a client of the form's URL and key). */
async function backend() {
  if (!onServer()) {
    opened ??= openExport(base).catch((err) => { opened = null; throw err; });
    return { model: await opened };
  }
  const url = $('server').value.trim();
  if (!url) throw new Error('type the URL of a `tfm-export serve`, e.g. http://127.0.0.1:8080');
  return { server: connect(url, { apiKey: $('apikey').value.trim() || undefined }) };
}

/** The ready line of the local model; the first time, the export's samples and default beams fill the form. */
function localReady(model) {
  if (!$('source').value) {
    $('source').value = (model.manifest.samples ?? []).slice(0, 4).join('\n');
    $('beams').value = generationConfig(model.manifest).numBeams; // the export's default (a Marian folder's num_beams)
  }
  const c = model.manifest.config;
  const v = model.manifest.variant;
  const variant = [v.dtype, v.quantize, v.optimized && 'optimized'].filter(Boolean).join(', ');
  return `ready: ${base} (${variant}; d_model ${c.d_model}, ${c.n_encoder_layers}+${c.n_decoder_layers} layers, ` +
    `max_len ${c.max_len}); ${knows(model.manifest.tokenizer)}`;
}

/** What the tokenizer takes: a chars model's characters, or tokenizer.json and its language count. */
function knows(spec) {
  if (spec.type === 'chars') return `knows ${JSON.stringify(spec.src_vocab.slice(spec.specials ?? 3).join(''))}`;
  const { target } = languageCodes(spec);
  return `${spec.file}${target.length > 1 ? `, ${target.length} target languages` : ''}`;
}

/** On load and when the mode or server changes: open the export or ask the server's health. */
async function prepare() {
  const turn = ++turns;
  $('server').disabled = !onServer();
  $('apikey').disabled = !onServer();
  $('translate').disabled = true;
  try {
    const { model, server } = await backend();
    const ready = server ? `ready: server ${server.url} (${(await server.health()).batching} batching)`
      : localReady(model);
    if (model && !$('source-lang').options.length) showLanguages(model.manifest); // once: keep the user's choice
    if (turn !== turns) return;
    setStatus(ready);
    $('translate').disabled = false;
    [window.tfmReady, window.tfmError] = [true, null];
  } catch (err) {
    if (turn !== turns) return;
    setStatus(`error: ${err.message}`, true);
    window.tfmError = err.message;
  }
}

async function onTranslate() {
  const texts = $('source').value.split('\n').map((t) => t.trim()).filter(Boolean);
  if (!texts.length) return setStatus('type at least one line', true);
  window.tfmResults = null;
  window.tfmLastError = null;
  $('translate').disabled = true;
  setStatus('translating…');
  try {
    const { model, server } = await backend();
    const options = formOptions(model);
    const languages = formLanguages();
    const rows = server ? await translateOnServer(server, texts, options, languages)
      : await translate(model, texts, options, languages);
    setStatus(summary(rows, options, server));
    window.tfmResults = rows;
  } catch (err) {
    setStatus(`error: ${err.message}`, true);
    window.tfmLastError = err.message;
  } finally {
    $('translate').disabled = false;
  }
}

if (params.get('server')) {
  $('server').value = params.get('server');
  document.querySelector('input[name=mode][value=server]').checked = true;
}
for (const radio of document.querySelectorAll('input[name=mode]')) radio.addEventListener('change', prepare);
$('server').addEventListener('change', prepare);
$('translate').addEventListener('click', onTranslate);
$('source').addEventListener('keydown', (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) onTranslate(); });
await prepare();
