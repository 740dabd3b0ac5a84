// `transcribe(..., { vad: true })`: only the recording's speech is transcribed (issue #60), the port of
// tfm_export/runtime/speech/chunks.py. The recording is cut to its speech spans (speech/vad.mjs), the spans merged
// into chunks of up to one Whisper window, each chunk transcribed on its own as a recording (speech/whisper.mjs),
// and every time in the answers (segments, words, each segment's seek) mapped back to the recording. The texts
// and ids are joined in order; the first chunk's language (given or detected) is the others'. No Node APIs.
import { RATE } from './silero.mjs';
import { SpeechMap, VadParameters, collectChunks, speechTimestamps } from './vad.mjs';

/** What chunking needs to know of the model (Python's ChunkPlan). */
export class ChunkPlan {
  constructor(samplingRate, windowSeconds, framesPerSecond = null) {
    this.samplingRate = samplingRate; this.windowSeconds = windowSeconds; this.framesPerSecond = framesPerSecond;
  }
}

/** Two chunks' texts in order: Whisper's begin with a space already; others get one between them. */
export function joinText(before, text) {
  if (!before || !text || /\s$/.test(before) || /^\s/.test(text)) return before + text;
  return `${before} ${text}`;
}

class Mapper {
  constructor(chunk, timeline, plan) { this.chunk = chunk; this.timeline = timeline; this.plan = plan; }

  time(seconds, isEnd = false, span = null) {
    const within = Math.min(Math.max(seconds, 0), this.chunk.seconds);
    return this.timeline.toRecording(this.chunk.offset + within, span, isEnd);
  }

  spanOf(start, end) {
    const middle = Math.min(Math.max((start + end) / 2, 0), this.chunk.seconds);
    return this.timeline.spanOf(this.chunk.offset + middle);
  }

  word(word) {
    const span = this.spanOf(word.start, word.end);
    return { ...word, start: this.time(word.start, false, span), end: this.time(word.end, false, span) };
  }

  segment(segment) {
    const mapped = { ...segment, start: this.time(segment.start), end: this.time(segment.end, true) };
    const fps = this.plan.framesPerSecond;
    if (segment.seek !== undefined && fps) mapped.seek = pyRound(this.time(segment.seek / fps) * fps);
    if (segment.words) {
      mapped.words = segment.words.map((w) => this.word(w));
      if (mapped.words.length) [mapped.start, mapped.end] = [mapped.words[0].start, mapped.words.at(-1).end];
    }
    return mapped;
  }
}

function pyRound(x) { // Python's round(x) to an integer: half to even
  const floor = Math.floor(x);
  const rest = x - floor;
  return rest > 0.5 || (rest === 0.5 && floor % 2 !== 0) ? floor + 1 : floor;
}

/** A recording's speech chunks and the map of their times back ({ chunks, timeline }; Python's speech_chunks). */
export async function speechChunks(ort, session, samples, plan, parameters = null) {
  const checked = VadParameters.of(parameters);
  if (plan.samplingRate !== RATE) {
    throw new Error(`the VAD reads ${RATE} Hz audio and this model ${plan.samplingRate} Hz; transcribe without vad`);
  }
  const spans = await speechTimestamps(ort, session, samples, checked);
  return { chunks: collectChunks(samples, spans, plan.windowSeconds), timeline: new SpeechMap(spans) };
}

/** Each chunk's answer, in order, as one answer with the recording's times (Python's joined). */
export function joined(speech, results, plan, language = null, wordTimestamps = false) {
  let text = '';
  let detected = null;
  const ids = [];
  const segments = [];
  const words = [];
  speech.chunks.forEach((chunk, n) => {
    const result = results[n];
    detected ??= result.language ?? null;
    const mapper = new Mapper(chunk, speech.timeline, plan);
    text = joinText(text, result.text);
    ids.push(...result.ids);
    segments.push(...result.segments.map((s) => mapper.segment(s)));
    words.push(...(result.words ?? []).map((w) => mapper.word(w)));
  });
  const out = { text, language: detected ?? language ?? null, segments, ids };
  if (wordTimestamps) out.words = words;
  return out;
}

/**
 * The recording's speech chunks (`samples`: Float32Array at 16 kHz), each transcribed by
 * `transcribe(samples, options)` one after the other, as one answer with the recording's times
 * (Python's transcribe_speech). `session`: the VAD's (speech/silero.mjs vadSession).
 */
export async function transcribeSpeech(ort, session, samples, transcribe, plan, parameters = null, options = {}) {
  const { language = null, ...rest } = options;
  const speech = await speechChunks(ort, session, samples, plan, parameters);
  const results = [];
  let detected = null;
  for (const chunk of speech.chunks) {
    const result = await transcribe(chunk.samples, { ...rest, language: language ?? detected, maxSeconds: null });
    detected ??= result.language ?? null;
    results.push(result);
  }
  return joined(speech, results, plan, language, Boolean(rest.wordTimestamps));
}

/** A Whisper export's chunks: up to one window (30 s); a segment's seek in its mel frames (Python's _whisper_plan). */
export function whisperPlan(manifest) {
  const f = manifest.features ?? {};
  const chunkLength = f.chunk_length ?? 30;
  const frames = Math.floor(chunkLength * (f.sampling_rate ?? RATE) / (f.hop_length ?? 160));
  return new ChunkPlan(f.sampling_rate ?? RATE, chunkLength, frames / chunkLength);
}
