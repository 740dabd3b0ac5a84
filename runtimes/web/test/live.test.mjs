// node --test runtimes/web/test/live.test.mjs (tests/test_web_live.py runs it)
// The page's live text (live-text.mjs, issue #61) in headless Chromium: its fake microphone plays a WAV file of
// several utterances once (then silence); the page records it for the file's length with "live text" on, and its
// StreamTranscriber (/lib/speech/streaming.mjs) confirms text while the recording goes on. Before Stop, text
// was confirmed and more was tentative at some point; after Stop, the live text (all confirmed) is the offline
// transcription of the file (Python's, which the test picked to be what was said) and the page's own offline
// transcript of the recording. Any console error, page error, failed request or HTTP error fails.
// Environment: TFM_LIVE_EXPECTED (a JSON file: { export, mic: { path, seconds, text, language } }), TFM_PYTHON,
// CHROMIUM (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { closeAll, openPage, testEnvironment, withMicrophone } from './harness.mjs';

const { skip, expected, browserPath, python } = testEnvironment('TFM_LIVE_EXPECTED', 'tests/test_web_live.py');
let url;
let context;
const words = (text) => text.split(/\s+/).filter(Boolean);

before(async () => {
  if (!skip) ({ url, context } = await withMicrophone(python, browserPath, expected.export, expected.mic.path));
});

after(() => closeAll(context));

test('the microphone\'s live text is confirmed while it records and ends as the offline transcript', { skip, timeout: 180_000 }, async () => {
  const problems = [];
  const page = await openPage(context, url, problems);
  await page.selectOption('#speech-lang', expected.mic.language);
  await page.fill('#speech-context', '0'); // the fixture was never trained with prompts
  assert.equal(await page.isChecked('#speech-live'), true); // on by default
  await page.evaluate(() => { [window.tfmTranscript, window.tfmSpeechError, window.tfmLive] = [null, null, null]; });
  await page.click('#record');
  // text confirmed while recording: within the file's length, before Stop
  await page.waitForFunction(() => window.tfmLive?.confirmed.trim(), null, { timeout: expected.mic.seconds * 1000 });
  await page.waitForFunction((s) => window.tfmRecordedSeconds >= s, expected.mic.seconds, { timeout: 60_000 });
  const during = await page.evaluate(() => ({ ...window.tfmLive, shown: document.querySelector('#live').textContent }));
  assert.equal(during.final, false);
  assert.ok(words(during.confirmed).length >= 1, JSON.stringify(during));
  assert.ok(during.updates.some((u) => u.tentative.trim()), 'no tentative text shown while recording');
  assert.ok(during.shown.startsWith(during.confirmed), 'the page shows the confirmed text first');
  await page.click('#record');
  await page.waitForFunction(() => window.tfmTranscript || window.tfmSpeechError, null, { timeout: 60_000 });
  const { live, transcript, error } = await page.evaluate(() => ({ live: window.tfmLive, transcript: window.tfmTranscript,
    error: window.tfmSpeechError }));
  assert.equal(error, null);
  assert.equal(live.final, true);
  assert.equal(live.tentative, '');
  assert.ok(live.confirmed.startsWith(during.confirmed), 'confirmed text changed');
  assert.deepEqual(words(live.confirmed), words(expected.mic.text));
  assert.deepEqual(words(live.confirmed), words(transcript.text));
  assert.equal(await page.textContent('#live-confirmed'), live.confirmed);
  assert.equal(await page.textContent('#live-tentative'), '');
  assert.deepEqual(problems, []);
});
