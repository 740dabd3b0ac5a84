// Voice activity detection: where a recording has speech (issue #60), the port of
// tfm_export/runtime/speech/vad.py. Silero VAD's probabilities (speech/silero.mjs: the model, run as Python runs
// it) become spans exactly as silero's get_speech_timestamps makes them (tests/test_node_vad.py: Node's spans
// equal Python's), then faster-whisper's collect_chunks and SpeechTimestampsMap. `ort` is onnxruntime-node or
// onnxruntime-web (the page passes its own). No Node APIs here.
//
//   const session = await vadSession(ort, model);                   (speech/silero.mjs)
//   speechTimestamps(ort, session, samples, new VadParameters())  -> [Span(start, end)] in samples
//   collectChunks(samples, spans, maxSeconds)                       -> [Chunk]: the spans' audio, merged
//   new SpeechMap(spans).toRecording(seconds)                       -> the recording's time
import { RATE, WINDOW, speechProbabilities } from './silero.mjs';

/** How probabilities become spans (silero's get_speech_timestamps' arguments, Python's field names), with
 * faster-whisper's defaults. */
export class VadParameters {
  constructor({ threshold = 0.5, neg_threshold = null, min_speech_duration_ms = 0, max_speech_duration_s = Infinity,
    min_silence_duration_ms = 2000, speech_pad_ms = 400, min_silence_at_max_speech = 98,
    use_max_poss_sil_at_max_speech = true, ...unknown } = {}) {
    const extra = Object.keys(unknown).sort();
    if (extra.length) {
      throw new Error(`unknown vad_parameters: ${extra.join(', ')}; they are ${FIELDS.join(', ')}`);
    }
    Object.assign(this, { threshold, neg_threshold, min_speech_duration_ms, max_speech_duration_s,
      min_silence_duration_ms, speech_pad_ms, min_silence_at_max_speech, use_max_poss_sil_at_max_speech });
    if (!(threshold > 0 && threshold < 1)) throw new Error(`VAD threshold must be between 0 and 1, got ${threshold}`);
    if (neg_threshold !== null && !(neg_threshold >= 0 && neg_threshold <= threshold)) {
      throw new Error(`VAD neg_threshold must be between 0 and the threshold (${threshold}), got ${neg_threshold}`);
    }
    for (const name of ['min_speech_duration_ms', 'min_silence_duration_ms', 'speech_pad_ms', 'min_silence_at_max_speech']) {
      if (this[name] < 0) throw new Error(`VAD ${name} must be 0 or more, got ${this[name]}`);
    }
    const shortest = (WINDOW + 2 * RATE * speech_pad_ms / 1000) / RATE;
    if (!(max_speech_duration_s > shortest)) {
      throw new Error(`VAD max_speech_duration_s must be over ${shortest} s (one 32 ms window and speech_pad_ms on ` +
        `both sides), got ${max_speech_duration_s}`);
    }
  }

  /** The parameters from themselves, an object of their fields, or null / undefined (the defaults). */
  static of(given) {
    return given instanceof VadParameters ? given : new VadParameters(given ?? {});
  }
}
const FIELDS = Object.keys(new VadParameters()).sort();

/** Speech from sample `start` to `end` (exclusive) of the recording at 16 kHz. */
export class Span {
  constructor(start, end) { this.start = start; this.end = end; }
}

/** The speech spans of a recording (Float32Array at 16 kHz), as silero's get_speech_timestamps. */
export async function speechTimestamps(ort, session, samples, parameters = new VadParameters()) {
  const probs = samples.length ? await speechProbabilities(ort, session, samples) : new Float32Array(0);
  return timestampsFromProbabilities(probs, samples.length, VadParameters.of(parameters));
}

// ---- probabilities -> spans (silero_vad's get_speech_timestamps_from_probs, 6.2.3; Python's _Scan) ---------

class Scan {
  constructor(p) {
    this.threshold = p.threshold;
    this.negThreshold = p.neg_threshold !== null ? p.neg_threshold : Math.max(p.threshold - 0.15, 0.01);
    this.pad = RATE * p.speech_pad_ms / 1000;
    this.minSpeech = RATE * p.min_speech_duration_ms / 1000;
    this.maxSpeech = RATE * p.max_speech_duration_s - WINDOW - 2 * this.pad;
    this.minSilence = RATE * p.min_silence_duration_ms / 1000;
    this.minSilenceAtMax = RATE * p.min_silence_at_max_speech / 1000;
    this.longestPause = p.use_max_poss_sil_at_max_speech;
    this.triggered = false; this.current = {}; this.speeches = [];
    this.reset();
  }

  reset(triggered = false) {
    this.prevEnd = 0; this.nextStart = 0; this.tempEnd = 0; this.possibleEnds = []; this.triggered = triggered;
  }

  step(prob, at) {
    if (prob >= this.threshold && this.tempEnd) {
      const pause = at - this.tempEnd;
      if (pause > this.minSilenceAtMax) this.possibleEnds.push([this.tempEnd, pause]);
      this.tempEnd = 0;
      if (this.nextStart < this.prevEnd) this.nextStart = at;
    }
    if (prob >= this.threshold && !this.triggered) {
      this.triggered = true; this.current = { start: at };
      return;
    }
    if (this.triggered && at - this.current.start > this.maxSpeech && this.cut(at)) return;
    if (prob < this.negThreshold && this.triggered) this.silence(at);
  }

  cut(at) {
    if (this.longestPause && this.possibleEnds.length) {
      let best = this.possibleEnds[0];
      for (const end of this.possibleEnds) if (end[1] > best[1]) best = end; // Python's max: the first longest
      const [prevEnd, pause] = best;
      this.prevEnd = prevEnd;
      this.current.end = prevEnd;
      this.speeches.push(this.current);
      this.current = {};
      this.nextStart = prevEnd + pause;
      const resumed = this.nextStart < prevEnd + at;
      if (resumed) this.current.start = this.nextStart;
      this.reset(resumed);
      return false;
    }
    if (this.prevEnd) {
      this.current.end = this.prevEnd;
      this.speeches.push(this.current);
      this.current = {};
      const resumed = !(this.nextStart < this.prevEnd);
      if (resumed) this.current.start = this.nextStart;
      this.reset(resumed);
      return false;
    }
    this.current.end = at;
    this.speeches.push(this.current);
    this.current = {};
    this.reset();
    return true;
  }

  silence(at) {
    if (!this.tempEnd) this.tempEnd = at;
    const pause = at - this.tempEnd;
    if (!this.longestPause && pause > this.minSilenceAtMax) this.prevEnd = this.tempEnd;
    if (pause < this.minSilence) return;
    this.current.end = this.tempEnd;
    if (this.current.end - this.current.start > this.minSpeech) this.speeches.push(this.current);
    this.current = {};
    this.reset();
  }
}

/** Speech spans from each window's P(speech): silero's get_speech_timestamps_from_probs at 16 kHz. */
export function timestampsFromProbabilities(probs, nSamples, parameters) {
  const scan = new Scan(parameters);
  probs.forEach((prob, i) => scan.step(prob, WINDOW * i));
  const { speeches } = scan;
  if (scan.current.start !== undefined && nSamples - scan.current.start > scan.minSpeech) {
    speeches.push({ ...scan.current, end: nSamples });
  }
  pad(speeches, scan.pad, nSamples);
  return speeches.map((s) => new Span(s.start, s.end));
}

function pad(speeches, padding, nSamples) {
  speeches.forEach((speech, i) => {
    if (i === 0) speech.start = Math.trunc(Math.max(0, speech.start - padding));
    if (i === speeches.length - 1) {
      speech.end = Math.trunc(Math.min(nSamples, speech.end + padding));
      return;
    }
    const after = speeches[i + 1];
    const pause = after.start - speech.end;
    if (pause < 2 * padding) {
      speech.end += Math.floor(pause / 2);
      after.start = Math.trunc(Math.max(0, after.start - Math.floor(pause / 2)));
    } else {
      speech.end = Math.trunc(Math.min(nSamples, speech.end + padding));
      after.start = Math.trunc(Math.max(0, after.start - padding));
    }
  });
}

// ---- spans -> chunks, and back (faster-whisper's collect_chunks and SpeechTimestampsMap) -------------------

/** The audio of consecutive speech spans, joined without the pauses between them. */
export class Chunk {
  constructor(samples, offset, spans) { this.samples = samples; this.offset = offset; this.spans = spans; }

  get seconds() { return this.samples.length / RATE; }
}

/** The spans' audio merged, in order, into chunks of at most `maxSeconds` each (Python's collect_chunks). */
export function collectChunks(samples, spans, maxSeconds = Infinity) {
  const chunks = [];
  let group = [];
  let length = 0;
  let done = 0;
  for (const span of spans) {
    if (group.length && length + span.end - span.start > maxSeconds * RATE) {
      chunks.push(makeChunk(samples, group, done));
      done += length;
      group = []; length = 0;
    }
    group.push(span);
    length += span.end - span.start;
  }
  if (group.length) chunks.push(makeChunk(samples, group, done));
  return chunks;
}

function makeChunk(samples, spans, before) {
  const audio = new Float32Array(spans.reduce((n, s) => n + s.end - s.start, 0));
  let at = 0;
  for (const s of spans) {
    audio.set(samples.subarray(s.start, s.end), at);
    at += s.end - s.start;
  }
  return new Chunk(audio, before / RATE, spans);
}

function roundTo(value, digits) { // Python's round(value, digits): from the double's exact decimal expansion
  return Number(value.toFixed(digits));
}

/** A time on the speech-only timeline -> the same moment of the recording (faster-whisper's SpeechTimestampsMap,
 * to the millisecond). */
export class SpeechMap {
  constructor(spans, precision = 3) {
    this.precision = precision;
    this.ends = [];
    this.silenceBefore = [];
    let previous = 0;
    let silent = 0;
    for (const span of spans) {
      silent += span.start - previous;
      previous = span.end;
      this.ends.push(span.end - silent);
      this.silenceBefore.push(silent / RATE);
    }
  }

  spanOf(seconds, isEnd = false) {
    const sample = Math.trunc(seconds * RATE);
    if (isEnd && this.ends.includes(sample)) return this.ends.indexOf(sample);
    let index = 0; // bisect.bisect: the spans ending at or before the sample
    while (index < this.ends.length && this.ends[index] <= sample) index += 1;
    return Math.min(index, this.ends.length - 1);
  }

  toRecording(seconds, span = null, isEnd = false) {
    const index = span === null ? this.spanOf(seconds, isEnd) : span;
    return roundTo(this.silenceBefore[index] + seconds, this.precision);
  }
}
