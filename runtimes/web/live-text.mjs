// Live text while the microphone records (issue #61), computed in this page: the recorder's 100 ms chunks
// (audio-in.mjs's Recorder, resampled to 16 kHz as they come) go into /lib/speech/streaming.mjs's
// StreamTranscriber, Node's port of Python's LocalAgreement-2 (runtime/speech/streaming.py): every second of
// new audio the buffer is transcribed again, and the words two transcriptions agree on are confirmed and
// never change (#live-confirmed); the rest of the latest one is tentative (#live-tentative, grey). At "Stop"
// the rest is confirmed. One step at a time: the chunks that came during a step go into the next one.
// For tests: window.tfmLive ({ confirmed, tentative, final, language, updates: [{ at (seconds recorded when it
// came), confirmed, tentative }] }).
import { StreamTranscriber } from '/lib/speech/streaming.mjs';

const $ = (id) => document.getElementById(id);

/** Shows the live text and keeps window.tfmLive. */
function show(state, update, at) {
  $('live-confirmed').textContent = update.text;
  $('live-tentative').textContent = update.tentative;
  Object.assign(state, { confirmed: update.text, tentative: update.tentative, final: update.final,
    language: update.language });
  state.updates.push({ at, confirmed: update.confirmed, tentative: update.tentative });
}

/**
 * A live stream over `model` with the form's transcribe `options` (and `promptChars`: the confirmed text trimmed
 * off the buffer that prompts the next steps): `chunk(samples)` as the recorder gives them, `finish()` at Stop
 * (resolves with the final update). `seconds()` says how much was recorded (each update's `at`); `onError`
 * gets a step's error line (the stream then stops).
 */
export function liveText(ort, model, { promptChars, numBeams, language, task, prompt }, seconds, onError) {
  const stream = new StreamTranscriber(ort, model, { language, task, prompt, numBeams, options: { promptChars } });
  const state = { confirmed: '', tentative: '', final: false, language: null, updates: [] };
  window.tfmLive = state;
  $('live').hidden = false;
  $('live-confirmed').textContent = '';
  $('live-tentative').textContent = '';
  let waiting = [];
  let running = Promise.resolve();
  let failed = false;
  const guard = (work) => work.catch((err) => { failed = true; onError(err.message); });
  const step = async () => {
    if (failed || !waiting.length) return;
    const samples = new Float32Array(waiting.reduce((n, c) => n + c.length, 0));
    waiting.reduce((at, c) => { samples.set(c, at); return at + c.length; }, 0);
    waiting = [];
    for (const update of await stream.feed(samples)) show(state, update, seconds());
  };
  return {
    chunk(samples) {
      waiting.push(samples);
      running = running.then(() => guard(step()));
    },
    async finish() {
      await running;
      if (failed) return null;
      let last = null;
      await guard((async () => { await step(); last = await stream.finish(); show(state, last, seconds()); })());
      return last;
    },
  };
}
