// What the page's browser tests share (browser, module, speech and live .test.mjs): what a test file reads from
// its environment, headless Chromium with a fresh profile (and a fake microphone), `tfm-export serve-web` and
// `tfm-export serve` started on loopback, and pages that record every problem they meet. `closeAll` stops what
// a test file started.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const started = []; // the servers this test file started
let profile; // Chromium's --user-data-dir

const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

/** A test file's environment: `expected`, the JSON file the variable `name` names (set by `runner`, the pytest
 * module that runs the file), CHROMIUM (`browserPath`, default /usr/bin/chromium) and TFM_PYTHON (`python`,
 * default python3); `skip`, why the file's tests cannot run (false when they can: `expected` is null then not). */
export function testEnvironment(name, runner) {
  const file = process.env[name];
  const browserPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
  const skip = !file ? `${name} is not set (${runner} sets it)`
    : !existsSync(browserPath) && `SKIPPED: chromium not found at ${browserPath}`;
  return { skip, browserPath, python: process.env.TFM_PYTHON ?? 'python3',
    expected: skip ? null : JSON.parse(readFileSync(file, 'utf8')) };
}

/** Headless Chromium at `executablePath` with a fresh profile (and `args` more); its browser context. */
export function launchChromium(executablePath, args = []) {
  profile = mkdtempSync(path.join(tmpdir(), 'tfm-chromium-'));
  return chromium.launchPersistentContext(profile, { executablePath, headless: true, args: [...CHROMIUM_ARGS, ...args] });
}

/** `tfm-export serve-web DIR --port 0` on 127.0.0.1; resolves with { proc, url } (the URL it prints). */
export function startServeWeb(python, dir) {
  const proc = spawn(python, ['-m', 'tfm_export', 'serve-web', dir, '--port', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
  started.push(proc);
  return new Promise((resolve, reject) => {
    let text = '';
    proc.stderr.on('data', (chunk) => {
      text += chunk;
      const match = text.match(/on (http:\/\/127\.0\.0\.1:\d+\/)/);
      if (match) resolve({ proc, url: match[1] });
    });
    proc.on('exit', (code) => reject(new Error(`serve-web exited (${code}): ${text}`)));
  });
}

/** `tfm-export serve-web DIR` and headless Chromium whose microphone is a fake device playing the WAV file at
 * `micPath` once, from when it opens, then silence (access granted, audio allowed to start without a gesture); resolves with { url, context }. */
export async function withMicrophone(python, browserPath, dir, micPath) {
  const { url } = await startServeWeb(python, dir);
  const context = await launchChromium(browserPath, ['--autoplay-policy=no-user-gesture-required',
    '--use-fake-device-for-media-stream', `--use-file-for-fake-audio-capture=${micPath}%noloop`,
    '--use-fake-ui-for-media-stream']);
  return { url, context };
}

/** A free loopback port (`tfm-export serve --port` takes no 0). */
function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer().on('error', reject);
    probe.listen(0, '127.0.0.1', () => { const { port } = probe.address(); probe.close(() => resolve(port)); });
  });
}

/** `tfm-export serve DIR ...args` on a free port; resolves with { proc, url } once /healthz answers. */
export async function startApi(python, dir, args) {
  const port = await freePort();
  const proc = spawn(python, ['-m', 'tfm_export', 'serve', dir, '--port', String(port), ...args],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  started.push(proc);
  let text = '';
  proc.stderr.on('data', (chunk) => { text += chunk; });
  const url = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
    if (proc.exitCode !== null) throw new Error(`tfm-export serve exited (${proc.exitCode}): ${text}`);
    if (await fetch(`${url}/healthz`).then((res) => res.ok, () => false)) return { proc, url };
    await new Promise((resolve) => { setTimeout(resolve, 200); });
  }
  throw new Error(`tfm-export serve did not answer within 60 s: ${text}`);
}

/** The page at `url`, ready; every problem it meets goes into `problems`: console errors, uncaught errors,
 * failed requests, HTTP >= 400. */
export async function openPage(context, url, problems) {
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

/** Closes the browser `context` (if any), stops every server started here and removes the profile. */
export async function closeAll(context) {
  await context?.close();
  for (const proc of started) proc.kill();
  if (profile) rmSync(profile, { recursive: true, force: true });
}
