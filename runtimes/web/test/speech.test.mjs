// node --test runtimes/web/test/speech.test.mjs (tests/test_web_speech.py runs it)
// Headless Chromium opens the page on a Whisper export (the trained fixture models/whisper-digits)
// served by `tfm-export serve-web`, and transcribes: a 16 kHz WAV file chosen with the file input, one
// dropped on the page (with the form's language, beams and timestamps) and a dropped FLAC file (the
// browser's decoder), and a dropped recording with a 12 s pause, "skip silence" ticked (Silero VAD from /vad/),
// its chunks decoded one after the other and then batched (the form's batch: Python's batch_size), and with the
// decoding row's options (a seeded temperature fallback, hotwords and a prefix: Python's temperature, seed, ...),
// give the Python runtime's ids, text, language and segments; the microphone, Chromium's fake device playing a WAV file
// once, is recorded for the file's length and gives the Python runtime's text of that file. Any console
// error, page error, failed request or HTTP error fails. Environment: TFM_SPEECH_EXPECTED (a JSON file:
// { export, files: [{ path, how: "input" | "drop", options: { language, numBeams, timestamps, prompt, vad, batchSize,
// temperature, seed, logprobThreshold, hotwords, prefix, ... (setOptions') },
// expected: { text, language, segments (their exact fields), measures (each segment's avg_logprob,
// compression_ratio, no_speech_prob), ids } }], mic: { path, seconds, text } }), TFM_PYTHON (default
// python3), CHROMIUM (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { closeAll, openPage as openPageAt, testEnvironment, withMicrophone } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const { skip, expected, browserPath, python } = testEnvironment('TFM_SPEECH_EXPECTED', 'tests/test_web_speech.py');
let url;
let context;
const openPage = (problems) => openPageAt(context, url, problems);

/** The form set to `options` (Node's names, as speech.mjs takes them; the decoding row's blank where left out). */
async function setOptions(page, { language = '', numBeams = 1, timestamps = false, prompt = '', vad = false, batchSize = 1,
  temperature = '', seed = '', compressionRatioThreshold = '', logprobThreshold = '', noSpeechThreshold = '',
  conditionOnPrevTokens = null, promptConditionType = 'first-segment', hotwords = '', prefix = '' }) {
  for (const [id, value] of [['temperature', [temperature].flat().join(',')], ['seed', seed],
    ['ratio', compressionRatioThreshold], ['logprob', logprobThreshold], ['nospeech', noSpeechThreshold],
    ['hotwords', hotwords], ['prefix', prefix]]) await page.fill(`#speech-${id}`, String(value));
  await page.selectOption('#speech-condition', conditionOnPrevTokens === null ? '' : conditionOnPrevTokens ? 'on' : 'off');
  await page.setChecked('#speech-all-segments', promptConditionType === 'all-segments');
  await page.setChecked('#speech-vad', vad);
  await page.fill('#speech-batch', String(batchSize));
  await page.selectOption('#speech-lang', language);
  await page.fill('#speech-beams', String(numBeams));
  await page.setChecked('#speech-timestamps', timestamps);
  await page.fill('#speech-prompt', prompt);
}

/** Waits for the transcript (or the error line) that `action` starts. */
async function transcript(page, action) {
  await page.evaluate(() => { [window.tfmTranscript, window.tfmSpeechError] = [null, null]; });
  await action();
  await page.waitForFunction(() => window.tfmTranscript || window.tfmSpeechError, null, { timeout: 60_000 });
  const { result, error } = await page.evaluate(() => ({ result: window.tfmTranscript, error: window.tfmSpeechError }));
  assert.equal(error, null);
  return result;
}

/** Drops the file at `file` on the page's drop zone, as a user dragging it from their desktop. */
async function drop(page, file) {
  const bytes = readFileSync(file).toString('base64');
  const dataTransfer = await page.evaluateHandle(({ bytes: b64, name }) => {
    const transfer = new DataTransfer();
    const data = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    transfer.items.add(new File([data], name));
    return transfer;
  }, { bytes, name: path.basename(file) });
  await page.dispatchEvent('#drop', 'drop', { dataTransfer });
}

before(async () => { // a microphone without a microphone: Chromium plays this WAV file in a loop, and grants access
  if (!skip) ({ url, context } = await withMicrophone(python, browserPath, expected.export, expected.mic.path));
});

after(() => closeAll(context));

test('a WAV file chosen or dropped is transcribed exactly like the Python runtime', { skip, timeout: 120_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  assert.match(await page.textContent('#status'), /^ready: .*Whisper: drop a recording/);
  assert.equal(await page.isVisible('#speech'), true);
  assert.equal(await page.isVisible('#source'), false);
  for (const { path: file, how, options, expected: want } of expected.files) {
    await setOptions(page, options);
    const got = await transcript(page, () => (how === 'drop' ? drop(page, file) : page.setInputFiles('#audio-file', file)));
    const what = `${how} ${path.basename(file)} ${JSON.stringify(options)}`;
    assert.deepEqual(got.ids, want.ids, what);
    const exact = got.segments.map(({ seek, start, end, text, tokens, temperature }) => ({ seek, start, end, text, tokens, temperature }));
    assert.deepEqual([got.text, got.language, exact], [want.text, want.language, want.segments], what);
    want.measures.forEach((measures, i) => Object.entries(measures).forEach(([name, value]) => { // within 1e-4
      const mine = got.segments[i][name];
      assert.ok(value === null ? mine === null : Math.abs(mine - value) <= 1e-4, `${what}: ${name} ${mine} vs ${value}`);
    }));
    assert.equal(got.source, 'file');
    assert.match(await page.textContent('#status'), new RegExp(`^${path.basename(file)}: [\\d.]+ s transcribed in \\d+ ms`));
    if (options.batchSize > 1) assert.match(await page.textContent('#status'), new RegExp(`batches of ${options.batchSize}`));
    assert.equal((await page.textContent('#transcripts tr:first-child td.out')).includes(want.segments[0].text.trim()), true);
    const srt = await page.evaluate(async () => (await fetch(document.querySelector('#speech-srt').href)).text());
    assert.equal(srt, want.srt, `${what}: the subtitles offered`);
    assert.equal(await page.getAttribute('#speech-srt', 'download'), `${path.basename(file).replace(/\.[^.]*$/, '')}.srt`);
  }
  mkdirSync(path.join(here, '..', 'test-output'), { recursive: true });
  await page.screenshot({ path: path.join(here, '..', 'test-output', 'speech.png'), fullPage: true });
  assert.deepEqual(problems, []);
});

test('the microphone is recorded, resampled to 16 kHz and transcribed like the file it plays', { skip, timeout: 120_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  await setOptions(page, { language: expected.mic.language });
  const got = await transcript(page, async () => {
    await page.click('#record');
    // The fake device loops the file from when it opens: recording the file's length gets it once
    // (shifted by the start-up latency into the file's trailing silence), never twice.
    await page.waitForFunction((s) => window.tfmRecordedSeconds >= s, expected.mic.seconds, { timeout: 30_000 });
    await page.click('#record');
  });
  assert.equal(got.source, 'microphone');
  assert.ok(Math.abs(got.seconds - expected.mic.seconds) < 0.5, `recorded ${got.seconds} s`);
  assert.equal(got.text, expected.mic.text);
  assert.equal(got.language, expected.mic.language);
  assert.deepEqual(problems, []);
});

test('a file that is not audio is one error line, and the page still works', { skip, timeout: 60_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  await page.setInputFiles('#audio-file', { name: 'notes.wav', mimeType: 'audio/wav', buffer: Buffer.from('not audio\n') });
  await page.waitForFunction(() => window.tfmSpeechError, null, { timeout: 30_000 });
  const error = await page.evaluate(() => window.tfmSpeechError);
  assert.match(error, /^notes\.wav: this browser cannot decode it as audio .*; convert it to a WAV file/);
  assert.equal((await page.textContent('#status')).split('\n').length, 1);
  assert.match(await page.textContent('#status'), /^error: notes\.wav: /);
  const [{ path: file, expected: want }] = expected.files;
  await setOptions(page, expected.files[0].options);
  const got = await transcript(page, () => page.setInputFiles('#audio-file', file));
  assert.deepEqual(got.ids, want.ids);
  assert.deepEqual(problems, []);
});

test('a bad decoding value is one error line naming its box, and the page still works', { skip, timeout: 60_000 }, async () => {
  const problems = [];
  const page = await openPage(problems);
  const [{ path: file, options, expected: want }] = expected.files;
  for (const [bad, says] of [[{ temperature: '0,hot' }, /^temperature takes numbers of 0 or more separated by commas/],
    [{ temperature: '-0.5' }, /^temperature takes numbers of 0 or more/], [{ seed: '-1' }, /^seed takes a whole number/],
    [{ seed: String(2n ** 64n) }, /^seed takes a whole number from 0 to 2\*\*64 - 1/],
    [{ logprobThreshold: 'low' }, /^log-prob takes a number, got "low"/],
    [{ compressionRatioThreshold: '2,4' }, /^compression ratio takes a number/]]) {
    await setOptions(page, { ...options, ...bad });
    await page.evaluate(() => { [window.tfmTranscript, window.tfmSpeechError] = [null, null]; });
    await page.setInputFiles('#audio-file', file);
    await page.waitForFunction(() => window.tfmTranscript || window.tfmSpeechError, null, { timeout: 30_000 });
    const error = await page.evaluate(() => window.tfmSpeechError);
    assert.match(error ?? '(none)', says, JSON.stringify(bad));
    assert.equal((await page.textContent('#status')).split('\n').length, 1);
  }
  await setOptions(page, options);
  const got = await transcript(page, () => page.setInputFiles('#audio-file', file));
  assert.deepEqual(got.ids, want.ids);
  assert.deepEqual(problems, []);
});
