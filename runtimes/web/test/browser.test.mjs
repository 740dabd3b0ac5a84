// node --test runtimes/web/test/
// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core) opens the page served by
// `tfm-export serve-web`, translates the fixture's inputs (greedy, streamed token by token, and with
// 4 beams), compares them with the Python runtime's output and fails on any console error, page
// error, failed request or HTTP error. In server mode the page calls a `tfm-export serve` of the same
// export on another port (another origin: the server allows the page's with --cors-origin).
// With TFM_FAMILY_EXPORT_DIR (an export with language codes: tokenizer.json, or a Marian export's
// source.tokenizer.json) and TFM_FAMILY_EXPECTED (a JSON file of the Python runtime's outputs on
// it), it also translates that export in the page, languages chosen in its selectors; tests/test_runtimes_families.py sets both.
// Environment: TFM_EXPORT_DIR (an export of the bundled model), TFM_PYTHON (a Python with tfm_export,
// default python3), CHROMIUM (default /usr/bin/chromium). Screenshots: runtimes/web/test-output/.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { closeAll, launchChromium, openPage as openPageAt, startApi as startServeApi, startServeWeb } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const exportDir = process.env.TFM_EXPORT_DIR;
const browserPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const familyDir = process.env.TFM_FAMILY_EXPORT_DIR;
const noBrowser = !existsSync(browserPath) && `SKIPPED: chromium not found at ${browserPath}`;
const skip = !exportDir ? 'TFM_EXPORT_DIR is not set (export the bundled model first: runtimes/run-tests.sh)' : noBrowser;
const familySkip = !familyDir ? 'TFM_FAMILY_EXPORT_DIR is not set (tests/test_runtimes_families.py sets it)' : noBrowser;
const fixture = JSON.parse(readFileSync(path.join(here, '..', '..', 'fixtures', 'expected.json'), 'utf8'));
const outDir = path.join(here, '..', 'test-output');
const python = process.env.TFM_PYTHON ?? 'python3';
const API_KEY = 'page-test-key';
let url;
let family; // the serve-web of TFM_FAMILY_EXPORT_DIR: { proc, url }
const startServer = (dir) => startServeWeb(python, dir);
/** A page on `base` + `query` that records every problem (harness.mjs). */
const openPage = (problems, query = '', base = url) => openPageAt(context, `${base}${query}`, problems);

/**
 * `tfm-export serve EXPORT` with an API key, allowing the page's origin (request-level batching: the
 * export has no static-cache decoder); resolves with its URL once /healthz answers.
 */
async function startApi() {
  api = await startServeApi(python, exportDir, ['--batching', 'request', '--cors-origin', new URL(url).origin,
    '--api-key', API_KEY, '--threads', '1', '--no-spin']);
  return api.url;
}
let context;
let api; // the `tfm-export serve` of the server-mode tests, started by the first of them

async function translate(page, lines, { beams = 1 } = {}) {
  await page.fill('#beams', String(beams));
  await page.fill('#source', lines.join('\n'));
  await page.click('#translate');
  await page.waitForFunction(() => window.tfmResults || window.tfmLastError, null, { timeout: 60_000 });
  return page.evaluate(() => ({ rows: window.tfmResults, error: window.tfmLastError }));
}

before(async () => {
  if (skip && familySkip) return;
  if (!skip) ({ url } = await startServer(exportDir));
  context = await launchChromium(browserPath);
});

after(() => closeAll(context));

test('the page translates the inputs exactly like the Python runtime', { skip, timeout: 120_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  assert.match(await page.textContent('#status'), /^ready: /);
  const { rows, error } = await translate(page, fixture.cases.map((c) => c.input));
  assert.equal(error, null);
  assert.deepEqual(rows.map((r) => r.output), fixture.cases.map((c) => c.text));
  assert.deepEqual(rows.map((r) => r.ids), fixture.cases.map((c) => c.ids));
  assert.ok(rows.every((r) => r.msPerToken > 0), 'every row has a per-token latency');
  assert.ok(rows.every((r) => r.pieces === r.tokens), 'greedy rows are streamed: one update per token');
  const cells = await page.$$eval('#results tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  assert.deepEqual(cells.map((c) => c[1]), fixture.cases.map((c) => c.text));
  assert.deepEqual(cells.map((c) => Number(c[2])), fixture.cases.map((c) => c.ids.length));
  assert.ok(cells.every((c) => Number(c[3]) > 0));
  assert.match(await page.textContent('#status'), /8 translated: [\d.]+ ms per token/);
  mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, 'screenshot.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('beam search with 4 beams gives the Python runtime\'s best hypotheses', { skip, timeout: 120_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  const search = fixture.searches[0]; // beam 4, n-best 4, computed by the Python runtime
  assert.deepEqual(search.options, { num_beams: 4, num_return_sequences: 4 });
  const { rows, error } = await translate(page, search.inputs.slice(0, 4), { beams: 4 });
  assert.equal(error, null);
  assert.deepEqual(rows.map((r) => r.ids), search.hypotheses.slice(0, 4).map((hyps) => hyps[0].ids));
  assert.match(await page.textContent('#status'), /4 translated: [\d.]+ ms per token on average \(beam search, 4 beams;/);
  const { rows: bad, error: refused } = await translate(page, ['12'], { beams: 0 });
  assert.equal(bad, null);
  assert.match(refused, /numBeams must be an integer of at least 1/);
  assert.deepEqual(problems, []);
});

test('an unknown character is shown as an error, not thrown', { skip, timeout: 60_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  const { rows, error } = await translate(page, ['12x']);
  assert.equal(rows, null);
  assert.match(error, /cannot encode "x" in "12x"/);
  assert.match(await page.textContent('#status'), /^error: cannot encode/);
  assert.equal(await page.isEnabled('#translate'), true);
  assert.deepEqual(problems, []);
});

test('on a server, the page streams exactly the Python runtime\'s translations', { skip, timeout: 180_000 }, async () => {
  const apiUrl = api?.url ?? await startApi();
  const problems = [];
  const page = await openPage(problems, `?server=${encodeURIComponent(apiUrl)}`);
  assert.equal(await page.textContent('#status'), `ready: server ${apiUrl} (request batching)`);
  await page.fill('#apikey', API_KEY);
  const { rows, error } = await translate(page, fixture.cases.map((c) => c.input));
  assert.equal(error, null);
  assert.deepEqual(rows.map((r) => r.output), fixture.cases.map((c) => c.text));
  assert.deepEqual(rows.map((r) => r.ids), fixture.cases.map((c) => c.ids));
  assert.ok(rows.every((r) => r.pieces === r.tokens), 'streamed: one event per token');
  const cells = await page.$$eval('#results tr', (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent)));
  assert.deepEqual(cells.map((c) => c[1]), fixture.cases.map((c) => c.text));
  assert.ok(cells.every((c) => Number(c[3]) > 0));
  assert.match(await page.textContent('#status'), /^8 translated: [\d.]+ ms per token on average \(greedy; server http:/);
  assert.deepEqual(problems, []);
});

test('the server\'s errors show on the page; it switches back to this browser', { skip, timeout: 180_000 }, async () => {
  const apiUrl = api?.url ?? await startApi();
  const problems = [];
  const page = await openPage(problems, `?server=${encodeURIComponent(apiUrl)}`);
  const { rows, error } = await translate(page, ['12']); // no API key typed
  assert.equal(rows, null);
  assert.equal(error, 'missing or wrong API key; send Authorization: Bearer KEY (HTTP 401)');
  await page.fill('#apikey', API_KEY);
  const { error: limit } = await translate(page, ['1'.repeat(200)]); // longer than the model's max_len
  assert.match(limit, /^source 1 has \d+ tokens, more than the max_len of \d+; shorten or split it \("split_sentences": true translates it sentence by sentence\) \(HTTP 413\)$/);
  // Chromium reports each 4xx answer itself (the page read it: CORS let it); nothing else went wrong
  assert.deepEqual(problems.filter((p) => !/\b(401|413)\b/.test(p)), []);
  await page.check('input[name=mode][value=local]');
  await page.waitForFunction(() => document.getElementById('status').textContent.startsWith('ready: /export'));
  const { rows: local } = await translate(page, [fixture.cases[0].input]);
  assert.deepEqual(local.map((r) => r.ids), [fixture.cases[0].ids]);
});

const familyTest = { skip: familySkip, timeout: 180_000 };
test('an export with language codes translates like the Python runtime', familyTest, async () => {
  // expected: { inputs, source_lang, runs: [{ target_lang, num_beams, ids, texts }] } (tests/test_runtimes_families.py)
  const expected = JSON.parse(readFileSync(process.env.TFM_FAMILY_EXPECTED, 'utf8'));
  family = await startServer(familyDir);
  const problems = [];
  const page = await openPage(problems, '', family.url);
  assert.match(await page.textContent('#status'), /^ready: .*tokenizer\.json, \d+ target languages/);
  assert.equal(await page.isVisible('#languages'), true);
  const codes = await page.$$eval('#target-lang option', (options) => options.map((o) => o.value));
  assert.ok(expected.runs.every((run) => codes.includes(run.target_lang)), codes.join(' '));
  if (expected.source_lang) await page.selectOption('#source-lang', expected.source_lang); // Marian: none
  for (const run of expected.runs) {
    await page.selectOption('#target-lang', run.target_lang);
    const { rows, error } = await translate(page, expected.inputs, { beams: run.num_beams });
    const what = `${run.target_lang}, ${run.num_beams} beams`;
    assert.equal(error, null, what);
    assert.deepEqual(rows.map((r) => r.ids), run.ids, what);
    assert.deepEqual(rows.map((r) => r.output), run.texts, what);
  }
  mkdirSync(outDir, { recursive: true });
  await page.screenshot({ path: path.join(outDir, 'languages.png'), fullPage: true });
  await page.selectOption('#target-lang', '');
  const { rows: chosen } = await translate(page, expected.inputs.slice(0, 1), { beams: 1 }); // the model's choice
  assert.equal(chosen.length, 1);
  assert.deepEqual(problems, []);
});
