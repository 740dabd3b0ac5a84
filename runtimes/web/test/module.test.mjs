// node --test runtimes/web/test/module.test.mjs (tests/test_runtimes_nocache.py runs it)
// Headless Chromium opens the page on module exports (a user's own architecture, `--adapter`), served
// by `tfm-export serve-web`: one with a decoder without a cache and no tokenizer decodes the lines'
// token ids greedily and with beam search to the Python runtime's ids; an encoder-only one is run and
// its outputs are within 1e-5 of Python's `run`. Any console error, page error, failed request or HTTP
// error fails. On a `tfm-export serve` of the first ("on a server", token ids box checked) the ids are
// Python's too. Environment: TFM_MODULE_EXPECTED (a JSON file: { seq2seq: { dir, sources, beams, greedy,
// beam }, encoderOnly: { dir, sources, outputs } }), TFM_PYTHON (default python3), CHROMIUM (default
// /usr/bin/chromium).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { closeAll, launchChromium, openPage as openPageAt, startApi as startServeApi, startServeWeb,
  testEnvironment } from './harness.mjs';

const { skip, expected, browserPath, python } = testEnvironment('TFM_MODULE_EXPECTED', 'tests/test_runtimes_nocache.py');
/** `tfm-export serve-web DIR`'s URL. */
const startServer = async (dir) => (await startServeWeb(python, dir)).url;
/** `tfm-export serve DIR` allowing `origin`: its URL. */
const startApi = async (dir, origin) => (await startServeApi(python, dir, ['--cors-origin', origin, '--threads', '1'])).url;
const openPage = (url, problems) => openPageAt(context, url, problems);
let context;

async function submit(page, lines, { beams = 1 } = {}) {
  await page.evaluate(() => { window.tfmResults = null; });
  await page.fill('#beams', String(beams));
  await page.fill('#source', lines.join('\n'));
  await page.click('#translate');
  await page.waitForFunction(() => window.tfmResults || window.tfmLastError, null, { timeout: 60_000 });
  return page.evaluate(() => ({ rows: window.tfmResults, error: window.tfmLastError }));
}

before(async () => {
  if (skip) return;
  context = await launchChromium(browserPath);
});

after(() => closeAll(context));

test('a module export without a tokenizer decodes token ids like the Python runtime', { skip, timeout: 180_000 }, async () => {
  const { dir, sources, beams, greedy, beam } = expected.seq2seq;
  const problems = [];
  const page = await openPage(await startServer(dir), problems);
  assert.match(await page.textContent('#status'), /^ready: .*, a decoder without a cache\); no tokenizer: token ids/);
  assert.equal(await page.isChecked('#as-ids'), true);
  assert.equal(await page.isDisabled('#as-ids'), true);
  const lines = sources.map((ids, n) => ids.join(n % 2 ? ', ' : ' ')); // spaces or commas
  const { rows, error } = await submit(page, lines);
  assert.equal(error, null);
  assert.deepEqual(rows.map((r) => r.ids), greedy);
  assert.deepEqual(rows.map((r) => r.output), greedy.map((ids) => ids.join(' ')));
  assert.ok(rows.every((r) => r.pieces === r.tokens), 'greedy rows are streamed: one update per token');
  assert.match(await page.textContent('#status'), new RegExp(`^${sources.length} translated: [\\d.]+ ms per token`));
  const { rows: searched, error: failed } = await submit(page, lines, { beams });
  assert.equal(failed, null);
  assert.deepEqual(searched.map((r) => r.ids), beam);
  const { rows: none, error: refused } = await submit(page, ['3 4', '5 x']);
  assert.equal(none, null);
  assert.equal(refused, 'line 2: token ids must be integers of at least 0 separated by spaces or commas, got "5 x"');
  assert.deepEqual(problems, []);
});

test('an encoder-only export is run: its outputs are Python\'s', { skip, timeout: 120_000 }, async () => {
  const { dir, sources, outputs } = expected.encoderOnly;
  const problems = [];
  const page = await openPage(await startServer(dir), problems);
  assert.match(await page.textContent('#status'), /^ready: .*, encoder-only\); no tokenizer/);
  assert.equal(await page.textContent('#translate'), 'Run');
  const { rows, error } = await submit(page, sources.map((ids) => ids.join(' ')));
  assert.equal(error, null);
  assert.deepEqual(rows.map((r) => r.ids), sources);
  for (const [name, want] of Object.entries(outputs)) {
    const got = rows.map((r) => r.outputs[name]).flat(Infinity);
    const flat = want.flat(Infinity);
    assert.equal(got.length, flat.length, name);
    const worst = Math.max(...got.map((v, i) => Math.abs(v - flat[i])));
    assert.ok(worst <= 1e-5, `${name}: max abs diff ${worst}`);
  }
  assert.match(await page.textContent('#status'), new RegExp(`^${sources.length} run: ${Object.keys(outputs).join(', ')}`));
  const cells = await page.$$eval('#results tr', (trs) => trs.map((tr) => tr.children[1].textContent));
  const first = Object.keys(outputs)[0];
  assert.ok(cells.every((text) => text.startsWith(`${first} [`)), cells.join(' | '));
  assert.deepEqual(problems, []);
});

test('on a server, the page sends token ids and shows Python\'s', { skip, timeout: 180_000 }, async () => {
  const { dir, sources, greedy } = expected.seq2seq;
  const problems = [];
  const web = await startServer(dir); // the page's origin, which the server must allow
  const api = await startApi(dir, new URL(web).origin);
  const live = await openPage(`${web}?server=${encodeURIComponent(api)}`, problems);
  assert.equal(await live.textContent('#status'), `ready: server ${api} (request batching)`);
  await live.check('#as-ids'); // a server may serve any export: the page asks
  const { rows, error } = await submit(live, sources.map((ids) => ids.join(' ')));
  assert.equal(error, null);
  assert.deepEqual(rows.map((r) => r.ids), greedy);
  assert.deepEqual(rows.map((r) => r.output), greedy.map((ids) => ids.join(' ')));
  assert.deepEqual(problems, []);
});
