// The page: open an export folder served over HTTP with onnxruntime-web (WASM), translate lines
// (greedy, beam search or seeded sampling), show each translation as its tokens come (a stream) with
// its per-token latency. The decoding calls are ../node/api.mjs's, shared with Node.
// Or, "on a server": send the lines to a `tfm-export serve` (../node/client.mjs, Node's client) and
// show its streamed tokens; that server must allow this page's origin (--cors-origin).
// Text goes through the export's tokenizer (../node/text/tokenizer.mjs: its vocabulary, or its
// tokenizer.json with @huggingface/tokenizers); a multilingual export shows language selectors.
// An export without a tokenizer (a module export of a user's own architecture) takes token ids, one
// source per line (ids.mjs; the "token ids" box, which any export may use), decoded by the same driver
// (../node/states/nocache.mjs for decoder_nocache.onnx); an encoder-only one is run and shows its outputs.
// A Whisper export (manifest `features`) shows the speech section instead (speech-page.mjs, imported
// only then): recordings dropped, chosen or spoken are transcribed by ../node/speech/whisper.mjs, Node's code.
// `tfm-export serve-web OUT` serves this folder at /, ../node's modules at /lib/, onnxruntime-web's
// dist/ at /ort/, @huggingface/tokenizers' dist/ at /tokenizers/ (index.html's import map) and OUT
// at /export/; `?export=URL` points the page elsewhere, `?server=URL` starts it on that server.
import * as ort from '/ort/ort.wasm.min.mjs';
import { connect } from '/lib/client.mjs';
import { stream } from '/lib/api.mjs';
import { checkManifest, graphFiles, runtimeGraphs } from '/lib/checks.mjs';
import { idsShower, parseIds, runRows, shape } from './ids.mjs';
import { DEFAULTS, generationConfig } from '/lib/options/generation.mjs';
import { languageCodes, languageOptions, makeTokenizer, tokenizerFiles } from '/lib/text/tokenizer.mjs';

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

/**
 * The manifest's tokenizer with its files (tokenizer.json), each checked against the sha256 in `files`;
 * null when the export has none (the page then takes token ids).
 */
async function openTokenizer(base, manifest) {
  if (!manifest.tokenizer) return null;
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
  if (tokenizer.idsOnly) {
    throw new Error(`the page cannot encode text with this "${tokenizer.kind}" tokenizer (only "chars", "hf" and ` +
      '"marian" exports with source.tokenizer.json); ' +
      'use `tfm-export serve` and "Run on a server"');
  }
  return tokenizer;
}

/** manifest.json (checked), its tokenizer, the graphs (sha256 checked) and one WASM session per graph. */
async function openExport(base) {
  const manifest = checkManifest(await (await fetchOk(`${base}/manifest.json`)).json(), `${base}/manifest.json`);
  // a module export's decoder is decoder_nocache.onnx; an encoder-only export has none (null)
  const graphs = Object.entries(runtimeGraphs(manifest)).filter(([, name]) => name);
  const extra = {}; // graphs the decode loops do not run (alignment.onnx: the live text's word times), on first use
  const model = { manifest, tokenizer: await openTokenizer(base, manifest), decoder: null,
    extraSession: (name) => (extra[name] ??= openGraph(base, manifest.graphs[name])) };
  for (const [role, name] of graphs) model[role] = await openGraph(base, manifest.graphs[name]);
  return model;
}

/** One graph of the manifest (sha256 checked) as a WASM session. */
async function openGraph(base, graph) {
  if (Object.keys(graphFiles(graph)).length > 1) {
    throw new Error(`${graph.file} keeps its weights in external data files (a model over 2 GB): too big for the browser`);
  }
  const bytes = new Uint8Array(await (await fetchOk(`${base}/${graph.file}`)).arrayBuffer());
  if ((await sha256(bytes)) !== graph.sha256) {
    throw new Error(`${graph.file} does not match the sha256 in manifest.json; re-run the export`);
  }
  return ort.InferenceSession.create(bytes, { executionProviders: ['wasm'] });
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

/** One source at a time, streamed into its row as the tokens come, so each row has its own latency. */
async function translate(model, texts, sources, options, { targetLang }) {
  const decoding = { ...languageOptions(model.tokenizer, targetLang), ...options }; // the target: a forced first token
  const show = idsShower(model.tokenizer);
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
      cells[1].textContent = show(ids);
      cells[2].textContent = ids.length;
    }
    const msPerToken = timings.stepsMs.reduce((a, b) => a + b, 0) / timings.stepsMs.length;
    cells[3].textContent = msPerToken.toFixed(2);
    rows.push({ input: text, output: show(ids), ids, tokens: ids.length, pieces,
      steps: timings.stepsMs.length, encoderMs: timings.encoderMs, msPerToken });
  }
  return rows;
}

/**
 * All lines in one streamed request (texts, or id lists: `sources`); each row shows its tokens as they
 * arrive, then the final text (ids when the export has no tokenizer: the server sends no text).
 */
async function translateOnServer(server, texts, sources, options, languages) {
  $('results').replaceChildren();
  const rows = texts.map((input) => ({ input, cells: addRow(input), output: '', ids: [], pieces: 0, arrivedMs: 0 }));
  const show = (row) => {
    row.cells[1].textContent = row.output || row.ids.join(' ');
    row.cells[2].textContent = row.ids.length;
  };
  const started = performance.now();
  for await (const event of server.streamEvents(sources, { ...serverOptions(options), ...languages })) {
    if (event.type === 'token') {
      const row = rows[event.index];
      Object.assign(row, { output: row.output + (event.text ?? ''), arrivedMs: performance.now() - started });
      row.ids.push(event.id);
      row.pieces += 1;
      show(row);
    } else { // done: the translations (beam search: its best hypotheses, which only now are known)
      for (const [n, { ids, text }] of event.translations.entries()) {
        const arrivedMs = rows[n].arrivedMs || performance.now() - started;
        Object.assign(rows[n], { ids, output: text ?? ids.join(' '), arrivedMs }); // no tokenizer: no text
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
let speech; // the speech section, shown once for a Whisper export (a promise)

/** A Whisper export's section instead of the text form (only in this browser: the server mode is text's). */
async function showSpeechSection(model) {
  const isSpeech = Boolean(model?.manifest.features);
  $('text-ui').hidden = isSpeech;
  $('speech').hidden = !isSpeech;
  if (!isSpeech) return;
  speech ??= import('./speech-page.mjs').then((page) => page.showSpeech(ort, model, setStatus))
    .catch((err) => { speech = null; throw err; });
  await speech;
}

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
  const { tokenizer, variant: v } = model.manifest;
  $('as-ids').checked ||= !tokenizer;
  $('as-ids').disabled = !tokenizer; // ids are all it takes
  $('translate').textContent = model.decoder ? 'Translate' : 'Run';
  $('out-head').textContent = model.decoder ? 'translation' : 'outputs';
  const variant = [v.dtype, v.quantize, v.optimized && 'optimized'].filter(Boolean).join(', ');
  return `ready: ${base} (${variant}; ${shape(model.manifest)}); ${knows(tokenizer, model.manifest)}`;
}

/** What the tokenizer takes: a chars model's characters, or tokenizer.json and its language count. */
function knows(spec, manifest) {
  if (manifest.features) return 'Whisper: drop a recording, choose one, or record';
  if (!spec) return 'no tokenizer: token ids, one source per line';
  if (spec.type === 'chars') return `knows ${JSON.stringify(spec.src_vocab.slice(spec.specials ?? 3).join(''))}`;
  const { target } = languageCodes(spec);
  const file = spec.type === 'marian' ? spec.sentencepiece?.source.file : spec.file; // Marian: its source model
  return `${file}${target.length > 1 ? `, ${target.length} target languages` : ''}`;
}

/** On load and when the mode or server changes: open the export or ask the server's health. */
async function prepare() {
  const turn = ++turns;
  $('server').disabled = !onServer();
  $('apikey').disabled = !onServer();
  $('translate').disabled = true;
  [$('as-ids').disabled, $('translate').textContent, $('out-head').textContent] = [false, 'Translate', 'translation'];
  try {
    const { model, server } = await backend();
    const ready = server ? `ready: server ${server.url} (${(await server.health()).batching} batching)`
      : localReady(model);
    if (model && !$('source-lang').options.length) showLanguages(model.manifest); // once: keep the user's choice
    await showSpeechSection(model);
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

/** The lines' sources: token ids (the box checked), texts for a server, else the tokenizer's ids. */
function lineSources(model, texts, { sourceLang, targetLang }) {
  if ($('as-ids').checked) return texts.map(parseIds);
  return model ? texts.map((text) => model.tokenizer.encode(text, sourceLang, targetLang)) : texts;
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
    const sources = lineSources(model, texts, languages); // every line checked before any runs
    const encoderOnly = model && !model.decoder;
    const rows = await (server ? translateOnServer(server, texts, sources, options, languages)
      : encoderOnly ? runRows(ort, model, texts, sources, $('results'), addRow) : translate(model, texts, sources, options, languages));
    setStatus(encoderOnly ? `${rows.length} run: ${Object.keys(rows[0].outputs).join(', ')} (WASM, 1 thread)`
      : summary(rows, options, server));
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
