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
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';

const expectedPath = process.env.TFM_MODULE_EXPECTED;
const browserPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const skip = !expectedPath ? 'TFM_MODULE_EXPECTED is not set (tests/test_runtimes_nocache.py sets it)'
  : !existsSync(browserPath) && `SKIPPED: chromium not found at ${browserPath}`;
const expected = skip ? null : JSON.parse(readFileSync(expectedPath, 'utf8'));
const python = process.env.TFM_PYTHON ?? 'python3';
const servers = [];
let context;
let profile;

/** `tfm-export serve-web DIR --port 0` on 127.0.0.1; resolves with its URL (the one it prints). */
function startServer(dir) {
  const proc = spawn(python, ['-m', 'tfm_export', 'serve-web', dir, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  servers.push(proc);
  return new Promise((resolve, reject) => {
    let text = '';
    proc.stderr.on('data', (chunk) => {
      text += chunk;
      const match = text.match(/on (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (match) resolve(match[1]);
    });
    proc.on('exit', (code) => reject(new Error(`serve-web exited (${code}): ${text}`)));
  });
}

/** A free loopback port (`tfm-export serve --port` takes no 0). */
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer().on('error', reject);
    probe.listen(0, '127.0.0.1', () => { const { port } = probe.address(); probe.close(() => resolve(port)); });
  });
}

/** `tfm-export serve DIR` allowing `origin`; resolves with its URL once /healthz answers. */
async function startApi(dir, origin) {
  const port = await freePort();
  const proc = spawn(python, ['-m', 'tfm_export', 'serve', dir, '--port', String(port), '--cors-origin', origin,
    '--threads', '1'], { stdio: ['ignore', 'ignore', 'pipe'] });
  servers.push(proc);
  let text = '';
  proc.stderr.on('data', (chunk) => { text += chunk; });
  const api = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
    if (proc.exitCode !== null) throw new Error(`tfm-export serve exited (${proc.exitCode}): ${text}`);
    if (await fetch(`${api}/healthz`).then((res) => res.ok, () => false)) return api;
    await new Promise((resolve) => { setTimeout(resolve, 200); });
  }
  throw new Error(`tfm-export serve did not answer within 60 s: ${text}`);
}

/** The page at `url` (a serve-web's, with e.g. ?server=URL), ready; every problem it reports goes into `problems`. */
async function openPage(url, problems) {
  const page = await context.newPage();
  page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console: ${msg.text()}`); });
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
  page.on('requestfailed', (req) => problems.push(`request failed: ${req.url()} ${req.failure()?.errorText}`));
  page.on('response', (res) => { if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`); });
  await page.goto(url);
  await page.waitForFunction(() => window.tfmReady || window.tfmError, null, { timeout: 60_000 });
  assert.equal(await page.evaluate(() => window.tfmError ?? null), null);
  return page;
}

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
  profile = mkdtempSync(path.join(tmpdir(), 'tfm-chromium-')); // a fresh --user-data-dir
  context = await chromium.launchPersistentContext(profile, {
    executablePath: browserPath,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  await context?.close();
  for (const proc of servers) proc.kill();
  if (profile) rmSync(profile, { recursive: true, force: true });
});

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
