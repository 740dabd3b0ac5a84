// Headless Chromium drives the page: translate the fixture's inputs, compare with the Python
// runtime, and fail on any console error, page error or failed request. Needs TFM_EXPORT_DIR,
// TFM_PYTHON (a Python with tfm_export) and CHROMIUM (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const exportDir = process.env.TFM_EXPORT_DIR;
const browserPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const skip = !exportDir ? 'TFM_EXPORT_DIR is not set' : !existsSync(browserPath) ? `${browserPath} not found` : false;
const fixture = JSON.parse(readFileSync(path.join(here, '..', '..', 'fixtures', 'expected.json'), 'utf8'));
let server;
let url;

before(async () => {
  if (skip) return;
  server = spawn(process.env.TFM_PYTHON ?? 'python3', ['-m', 'tfm_export', 'serve-web', exportDir, '--port', '0'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  url = await new Promise((resolve, reject) => {
    let text = '';
    server.stderr.on('data', (chunk) => {
      text += chunk;
      const match = text.match(/on (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (match) resolve(match[1]);
    });
    server.on('exit', (code) => reject(new Error(`serve-web exited (${code}): ${text}`)));
  });
});

after(() => server?.kill());

test('the page translates the samples exactly like the Python runtime', { skip, timeout: 120_000 }, async () => {
  const browser = await chromium.launch({
    executablePath: browserPath,
    headless: true, // playwright gives every launch a fresh, empty profile
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const problems = [];
  try {
    const page = await browser.newPage();
    page.on('console', (msg) => { if (msg.type() === 'error') problems.push(`console: ${msg.text()}`); });
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('requestfailed', (req) => problems.push(`request failed: ${req.url()}`));
    page.on('response', (res) => { if (res.status() >= 400) problems.push(`HTTP ${res.status()}: ${res.url()}`); });
    await page.goto(url);
    await page.waitForFunction(() => window.tfmReady || window.tfmError, null, { timeout: 60_000 });
    assert.equal(await page.evaluate(() => window.tfmError ?? null), null);
    await page.fill('#source', fixture.cases.map((c) => c.input).join('\n'));
    await page.click('#translate');
    await page.waitForFunction(() => window.tfmResults, null, { timeout: 60_000 });
    const rows = await page.evaluate(() => window.tfmResults);
    assert.deepEqual(rows.map((r) => r.output), fixture.cases.map((c) => c.text));
    assert.deepEqual(rows.map((r) => r.ids), fixture.cases.map((c) => c.ids));
    assert.ok(rows.every((r) => r.msPerToken > 0));
    const cells = await page.$$eval('#results tr td:nth-child(2)', (tds) => tds.map((td) => td.textContent));
    assert.deepEqual(cells, fixture.cases.map((c) => c.text));
    const outDir = path.join(here, '..', 'test-output');
    mkdirSync(outDir, { recursive: true });
    await page.screenshot({ path: path.join(outDir, 'screenshot.png'), fullPage: true });
  } finally {
    await browser.close();
  }
  assert.deepEqual(problems, []);
});
