// The page's speech section, shown for a Whisper export (its manifest has `features`): a recording
// dropped on the page, chosen, or spoken into the microphone is transcribed in this browser by
// /lib/speech/whisper.mjs, Node's transcribe (audio/features.mjs's log-mel features, speech/prompt.mjs's
// prompt, speech/rules.mjs's rules, speech/longform.mjs's windows): one implementation, so a 16 kHz WAV
// file gives Python's ids and text.
// app.mjs imports this module only for such an export, so a text export never loads fft.js or wavefile.
// The latest transcript's subtitles can be downloaded (#speech-srt, speech/subtitles.mjs's toSrt: Python's --format srt).
// While the microphone records, its live text (live-text.mjs: confirmed and tentative) shows as it is spoken.
// "skip silence" transcribes only the speech Silero VAD finds (/vad/'s model, /lib/speech/chunks.mjs: Node's
// transcribe with vad: true, so the page's text is Python's transcribe(vad=True)'s). With "batch" above 1 the
// VAD chunks are decoded that many together (/lib/speech/batch.mjs, Node's transcribe with vad and batchSize:
// the encoder batched over a round's chunks, the decoder's rows together), the text Python's batch_size's.
// The decoding row sets the options of every window as tfm-export transcribe's flags do (the temperature fallback,
// its seed and thresholds, the previous text, the prompt on every window, hotwords, a prefix): the same call, so the
// same ids as Python's transcribe with them; a bad value is one error line.
// For tests: window.tfmTranscript (the latest result: { name, source, text, language, segments, ids,
// seconds, ms }), window.tfmSpeechError (the latest error line), window.tfmRecordedSeconds.
import { fileAudio, Recorder } from './audio-in.mjs';
import { liveText } from './live-text.mjs';
import { featureConfig } from '/lib/audio/features.mjs';
import { toSrt } from '/lib/speech/subtitles.mjs';
import { audioSamples, transcribe } from '/lib/speech/whisper.mjs';
import { transcribeBatch } from '/lib/speech/batch.mjs';
import { transcribeSpeech, whisperPlan } from '/lib/speech/chunks.mjs';
import { MODEL_FILE as VAD_FILE, vadSession } from '/lib/speech/silero.mjs';
import { whisperLanguages, whisperSettings } from '/lib/speech/prompt.mjs';

const $ = (id) => document.getElementById(id);

/** A box's text, or undefined when blank (the option's default). */
const typed = (id) => $(id).value.trim() || undefined;
const SEEDS = 2n ** 64n; // Python's seed range: 0 .. 2**64 - 1

/** A threshold box's number (blank: the folder's), or one line naming the box. */
function threshold(id, name) {
  const text = typed(id);
  if (text === undefined) return undefined;
  if (!Number.isFinite(Number(text))) throw new Error(`${name} takes a number, got ${JSON.stringify(text)}`);
  return Number(text);
}

/** The temperature box: one number, the fallback's list (0,0.2,...), or one line. */
function temperatureOption() {
  const text = typed('speech-temperature');
  if (text === undefined) return undefined;
  const values = text.split(',').map((t) => (t.trim() === '' ? NaN : Number(t)));
  if (values.some((t) => !Number.isFinite(t) || t < 0)) {
    throw new Error(`temperature takes numbers of 0 or more separated by commas (0,0.2,0.4), got ${JSON.stringify(text)}`);
  }
  return values.length > 1 ? values : values[0];
}

/** The seed box: a whole number below 2**64 (a BigInt past 2**53, as generationConfig takes it), or one line. */
function seedOption() {
  const text = typed('speech-seed');
  if (text === undefined) return undefined;
  const big = /^\d+$/.test(text) ? BigInt(text) : -1n;
  if (big < 0n || big >= SEEDS) throw new Error(`seed takes a whole number from 0 to 2**64 - 1, got ${JSON.stringify(text)}`);
  return big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

/**
 * The form's options of every window (tfm-export transcribe's --temperature, --seed, --*-threshold,
 * --condition-on-prev-tokens, --prompt-condition-type, --hotwords, --prefix): those given only, a bad one one line.
 */
function windowOptions() {
  const options = { temperature: temperatureOption(), seed: seedOption(),
    compressionRatioThreshold: threshold('speech-ratio', 'compression ratio'),
    logprobThreshold: threshold('speech-logprob', 'log-prob'), noSpeechThreshold: threshold('speech-nospeech', 'no speech'),
    conditionOnPrevTokens: { on: true, off: false }[$('speech-condition').value],
    promptConditionType: $('speech-all-segments').checked ? 'all-segments' : undefined,
    hotwords: typed('speech-hotwords'), prefix: typed('speech-prefix') };
  return Object.fromEntries(Object.entries(options).filter(([, value]) => value !== undefined));
}

/** The form's transcribe options (speech.mjs checks them: a bad one is its one-line error). */
function speechOptions() {
  const options = { numBeams: Number($('speech-beams').value), timestamps: $('speech-timestamps').checked };
  if ($('speech-lang').value) options.language = $('speech-lang').value;
  if ($('speech-task').value === 'translate') options.task = 'translate';
  if ($('speech-prompt').value.trim()) options.prompt = $('speech-prompt').value;
  return options;
}

/** The download link of the latest transcript's subtitles (`tfm-export transcribe --format srt`'s file). */
function offerSubtitles(name, segments) {
  const link = $('speech-srt');
  if (link.href) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(new Blob([toSrt(segments)], { type: 'application/x-subrip' }));
  link.download = `${name.replace(/\.[^.]*$/, '')}.srt`;
  link.hidden = false;
}

/** A transcripts row: the recording, its text (timed segments with timestamps), language, length, time taken. */
function addTranscript({ name, text, segments, language, seconds, ms }, timestamps) {
  const tr = document.createElement('tr');
  const time = (s) => s.toFixed(2);
  const shown = timestamps ? segments.map((s) => `[${time(s.start)} → ${time(s.end)}] ${s.text.trim()}`).join('\n') : text.trim();
  for (const [value, cls] of [[name, ''], [shown, 'out'], [language ?? '', ''], [seconds.toFixed(1), 'num'], [Math.round(ms), 'num']]) {
    const td = document.createElement('td');
    td.className = cls;
    td.textContent = value;
    tr.append(td);
  }
  $('transcripts').prepend(tr); // the latest first
}

let vadLoading = null;

/** Silero VAD's session, loaded on first use from /vad/ (the server has it when the install does). */
function vad(ort) {
  vadLoading ??= vadSession(ort, `/vad/${VAD_FILE}`).catch((err) => {
    vadLoading = null;
    throw new Error(`the VAD model (/vad/${VAD_FILE}) cannot be loaded (${err.message}); untick "skip silence"`);
  });
  return vadLoading;
}

/** VAD chunks decoded together (the form's batch, with "skip silence"; 1: one after the other). */
function batchSize() {
  const size = Number($('speech-batch').value);
  if (!Number.isInteger(size) || size < 1) throw new Error(`batch must be a whole number of 1 or more, got ${$('speech-batch').value}`);
  return size;
}

/** The recording's transcription as the form asks: whole, its speech chunk by chunk, or its chunks batched. */
async function transcribePage(ort, model, samples, options) {
  if (!$('speech-vad').checked) return transcribe(ort, model, samples, options);
  const [session, size] = [await vad(ort), batchSize()];
  const one = (chunk, o) => transcribe(ort, model, chunk, o);
  const plan = whisperPlan(model.manifest);
  if (size === 1) return transcribeSpeech(ort, session, samples, one, plan, null, options);
  const { label, ...rest } = options;
  return (await transcribeBatch(ort, model, [samples], one, plan, size, { ...rest, session, labels: [label] }))[0];
}

/** Inputs off while a recording is transcribed (one at a time: the sessions are not re-entrant). */
function setBusy(busy) {
  $('audio-file').disabled = busy;
  $('record').disabled = busy;
}

/**
 * A transcriber of the page: `run(name, source, getAudio)` transcribes what `getAudio` gives (WAV bytes
 * or samples at the model's rate) as `name`, into a row, the status line and window.tfmTranscript.
 */
function transcriber(ort, model, samplingRate, setStatus) {
  let busy = false;
  return async (name, source, getAudio) => {
    if (busy) return;
    [busy, window.tfmTranscript, window.tfmSpeechError] = [true, null, null];
    setBusy(true);
    try {
      const samples = audioSamples(await getAudio(), samplingRate, name); // WAV bytes: audio.mjs, as in Node
      const seconds = samples.length / samplingRate;
      setStatus(`transcribing ${name}…`);
      const options = { ...speechOptions(), ...windowOptions() }; // the live text (startLive) takes the first only
      const start = performance.now();
      const result = await transcribePage(ort, model, samples, { ...options, label: name });
      const ms = performance.now() - start;
      const row = { name, source, ...result, seconds, ms };
      addTranscript(row, options.timestamps);
      offerSubtitles(name, result.segments);
      setStatus(`${name}: ${seconds.toFixed(1)} s transcribed in ${Math.round(ms)} ms ` +
        `(${options.numBeams > 1 ? `beam search, ${options.numBeams} beams` : 'greedy'}` +
        `${$('speech-vad').checked ? `, speech only (VAD${batchSize() > 1 ? `, batches of ${batchSize()}` : ''})` : ''}` +
        '; WASM, 1 thread)');
      window.tfmTranscript = row;
    } catch (err) {
      setStatus(`error: ${err.message}`, true);
      window.tfmSpeechError = err.message;
    } finally {
      busy = false;
      setBusy(false);
    }
  };
}

/** The speech section of one opened Whisper export; `setStatus(text, isError)` is the page's status line. */
export function showSpeech(ort, model, setStatus) {
  const settings = whisperSettings(model.manifest); // a Whisper export without its settings: one line, now
  const { samplingRate } = featureConfig(model.manifest);
  const languages = whisperLanguages(settings);
  $('speech-lang').replaceChildren(new Option(languages.length ? '(detect)' : '(English only)', ''),
    ...languages.map((code) => new Option(code, code)));
  $('speech-lang').disabled = $('speech-task').disabled = !languages.length;
  $('speech').hidden = false;
  const run = transcriber(ort, model, samplingRate, setStatus);
  let recorder = null;

  const onFile = (file) => file && run(file.name, 'file', () => fileAudio(file, samplingRate));
  $('audio-file').addEventListener('change', () => { onFile($('audio-file').files[0]); $('audio-file').value = ''; });
  $('drop').addEventListener('dragover', (e) => { e.preventDefault(); $('drop').classList.add('over'); });
  $('drop').addEventListener('dragleave', () => $('drop').classList.remove('over'));
  $('drop').addEventListener('drop', (e) => {
    e.preventDefault();
    $('drop').classList.remove('over');
    onFile(e.dataTransfer.files[0]);
  });
  $('record').addEventListener('click', async () => {
    if (!recorder) {
      recorder = await startRecording(setStatus, startLive(ort, model, samplingRate, () => window.tfmRecordedSeconds ?? 0, setStatus));
      return;
    }
    const stopping = recorder;
    recorder = null;
    clearInterval(stopping.ticker);
    $('record').textContent = 'Record';
    const audio = stopping.stop(samplingRate); // sends the live text its last chunk, now
    audio.catch(() => {}); // (its error is run's: one line)
    await stopping.live?.finish();
    await run('microphone', 'microphone', () => audio);
  });
}

/** The live text of a recording about to start (the form's options), or null with "live text" off. */
function startLive(ort, model, samplingRate, seconds, setStatus) {
  if (!$('speech-live').checked) return null;
  const options = { ...speechOptions(), promptChars: Number($('speech-context').value) };
  delete options.timestamps;
  const onError = (line) => { setStatus(`error: ${line}`, true); window.tfmSpeechError = line; };
  return { rate: samplingRate, ...liveText(ort, model, options, seconds, onError) };
}

/** Opens the microphone (with `live`, its live text: liveText's, fed as it records): the button becomes "Stop",
 * the recorded length ticks; null (and the error line) if it cannot. */
async function startRecording(setStatus, live = null) {
  window.tfmSpeechError = null;
  $('record').disabled = true; // a second click while the microphone opens would open another
  try {
    const recorder = await Recorder.start(live && { rate: live.rate, onChunk: live.chunk });
    recorder.live = live;
    $('record').textContent = 'Stop';
    setStatus(live ? 'recording… live text below (Stop transcribes the whole recording)' : 'recording… (Stop transcribes)');
    recorder.ticker = setInterval(() => {
      window.tfmRecordedSeconds = recorder.seconds;
      $('recorded').textContent = `${recorder.seconds.toFixed(1)} s`;
    }, 100);
    return recorder;
  } catch (err) {
    setStatus(`error: ${err.message}`, true);
    window.tfmSpeechError = err.message;
    return null;
  } finally {
    $('record').disabled = false;
  }
}
