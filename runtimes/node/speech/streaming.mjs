// Live transcription: Whisper over a growing audio buffer, text confirmed by LocalAgreement-2, the port of
// tfm_export/runtime/speech/streaming.py (issue #61), step for step, so that the same chunks give the same
// confirmed text as Python (tests/test_node_streaming.py):
//
//   const stream = new StreamTranscriber(ort, model, { language: 'en' });
//   for await (const chunk of microphone()) {          // Float32Array samples at 16 kHz, any length (100 ms)
//     for (const update of await stream.feed(chunk)) show(update.text, update.tentative);
//   }
//   const last = await stream.finish();                // everything left, confirmed (update.final)
//
// whisper_streaming's policy (Macháček, Dabre, Bojar 2023): each step re-transcribes the whole buffer with
// timestamps (word times from alignment.onnx when the export has it, else each segment's time spread over its
// words by their length), prompted with the confirmed text trimmed off the buffer; the longest common prefix
// of this hypothesis and the previous one is confirmed and never changes; the buffer is cut in the pause
// after a confirmed segment once it is longer than `trimSeconds`. See the Python module for the details.
// No Node APIs: the browser page imports it (runtimes/web/speech-page.mjs) and runs it over the microphone.
import { featureConfig } from '../audio/features.mjs';
import { transcribe } from './whisper.mjs';

const LATE_S = 0.1; // a hypothesis's word may start this much before the last confirmed one ended
const NEAR_S = 1.0; // only a hypothesis that starts this close to the last confirmed word can repeat its last words
const ALIGNMENT = 'alignment'; // speech/words.mjs's graph

/** Python's round(): half to even (the buffer's cut in samples, as Python's int(round(...))). */
function roundHalfEven(x) {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** How often the buffer is re-transcribed and how it is kept short (Python's StreamOptions). */
export class StreamOptions {
  constructor({ stepSeconds = 1.0, trimSeconds = null, promptChars = 200, overlapWords = 5 } = {}) {
    if (!(stepSeconds > 0) || (trimSeconds !== null && !(trimSeconds > 0))) {
      throw new Error('stepSeconds and trimSeconds must be above 0');
    }
    Object.assign(this, { stepSeconds, trimSeconds, promptChars, overlapWords });
    Object.freeze(this);
  }
}

/** A word of a hypothesis: seconds from the stream's start, its text as decoded (its leading space kept). */
export class Word {
  constructor(start, end, text) {
    Object.assign(this, { start, end, text });
  }

  get key() {
    return this.text.trim();
  }
}

/** What one step changed: `confirmed` is appended to the text for good; `tentative` replaces the last one. */
export class StreamUpdate {
  constructor({ confirmed, tentative, text, words = [], final = false, language = null }) {
    Object.assign(this, { confirmed, tentative, text, words, final, language });
  }
}

const keys = (words) => words.map((w) => w.key);
const sameKeys = (a, b) => a.length === b.length && a.every((w, i) => w.key === b[i].key);
const joined = (words) => words.map((w) => w.text).join('');

/** LocalAgreement-2 over consecutive hypotheses (Python's Agreement, whisper_streaming's HypothesisBuffer). */
export class Agreement {
  constructor(overlapWords = 5) {
    this.overlapWords = overlapWords;
    this.confirmed = []; // confirmed words still inside the audio buffer
    this.pending = []; // the last hypothesis past the confirmed words
    this.lastEnd = 0.0; // where the last confirmed word ended
    this.matched = false; // the last hypothesis began with the confirmed words in the buffer
  }

  /** Confirm the common prefix of `hypothesis` (less the confirmed words) and the previous one. */
  agree(hypothesis) {
    const known = this.confirmed.length;
    this.matched = sameKeys(hypothesis.slice(0, known), this.confirmed);
    const fresh = this.matched ? hypothesis.slice(known) : this.afterConfirmed(hypothesis);
    let agreed = 0;
    while (agreed < Math.min(fresh.length, this.pending.length) && fresh[agreed].key === this.pending[agreed].key) agreed++;
    return this.confirm(fresh.slice(0, agreed), fresh.slice(agreed));
  }

  /** The words that start after the last confirmed one ended, less up to `overlapWords` repeated at their head. */
  afterConfirmed(hypothesis) {
    const fresh = hypothesis.filter((w) => w.start > this.lastEnd - LATE_S);
    if (fresh.length && this.confirmed.length && Math.abs(fresh[0].start - this.lastEnd) < NEAR_S) {
      const most = Math.min(this.confirmed.length, fresh.length, this.overlapWords);
      for (let n = 1; n <= most; n++) {
        if (keys(this.confirmed.slice(-n)).join('\n') === keys(fresh.slice(0, n)).join('\n')) return fresh.slice(n);
      }
    }
    return fresh;
  }

  confirm(words, pending) {
    this.confirmed.push(...words);
    this.pending = pending;
    if (words.length) this.lastEnd = words.at(-1).end;
    return words;
  }

  /** The audio before `seconds` is gone, and with it the first `count` confirmed words. */
  forget(count, seconds) {
    this.confirmed = this.confirmed.slice(count);
    this.lastEnd = this.confirmed.length ? Math.max(this.lastEnd, seconds) : seconds;
  }
}

/** A transcript's segment in stream seconds (Python's segment_words): alignment.onnx's words (`timed`), else
 * its span shared out by the words' lengths. */
export function segmentWords(segment, offset, timed) {
  const [start, end] = [segment.start + offset, segment.end + offset];
  if (timed) return { start, end, words: (segment.words ?? []).map((w) => new Word(w.start + offset, w.end + offset, w.word)) };
  const pieces = segment.text.match(/\s*\S+/g) ?? [];
  const total = pieces.reduce((sum, p) => sum + p.trim().length, 0) || 1;
  let done = 0;
  const words = pieces.map((piece) => {
    const begin = start + ((end - start) * done) / total;
    done += piece.trim().length;
    return new Word(begin, start + ((end - start) * done) / total, piece);
  });
  return { start, end, words };
}

function concat(a, b) {
  const out = new Float32Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/**
 * One live stream's buffer and its confirmed text (Python's StreamTranscriber). `options`: language, task,
 * prompt (text the stream is conditioned on throughout), `options` (a StreamOptions, or its fields), and
 * each step's transcribe options (numBeams, maxNewTokens; promptLookupNumTokens or an assistant: each step decodes
 * speculatively, speech/assisted.mjs, with plain greedy's ids and so the same updates). One caller at a time: await
 * each feed.
 */
export class StreamTranscriber {
  constructor(ort, model, { language = null, task = 'transcribe', prompt = null, options = new StreamOptions(),
    ...transcribeOptions } = {}) {
    if (!model.manifest.features) throw new Error('live transcription needs a Whisper export (a frames model decodes a recording whole)');
    const features = featureConfig(model.manifest);
    Object.assign(this, { ort, model, language, task });
    this.options = options instanceof StreamOptions ? options : new StreamOptions(options);
    this.rate = features.samplingRate;
    this.windowSeconds = features.nSamples / this.rate;
    this.trimSeconds = this.options.trimSeconds || this.windowSeconds / 2;
    this.timed = ALIGNMENT in model.manifest.graphs;
    this.transcribeOptions = transcribeOptions;
    this.audio = new Float32Array(0);
    this.offset = 0.0; // seconds of the stream before the buffer's first sample
    this.fresh = 0; // samples appended since the last step
    this.agreement = new Agreement(this.options.overlapWords);
    this.text = ''; // all confirmed text
    this.initial = (prompt ?? '').trim();
    this.context = ''; // the confirmed text trimmed off the buffer (its last promptChars are the prompt)
    this.segments = []; // the last hypothesis's
    this.steps = 0;
  }

  /** Add samples (a Float32Array in [-1, 1] at the model's rate) without transcribing. */
  append(samples) {
    if (!(samples instanceof Float32Array || samples instanceof Float64Array)) {
      throw new Error(`stream samples must be a Float32Array at ${this.rate} Hz, got ${samples?.constructor?.name ?? typeof samples}`);
    }
    this.audio = concat(this.audio, samples instanceof Float32Array ? samples : Float32Array.from(samples));
    this.fresh += samples.length;
  }

  /** Seconds of audio in the buffer. */
  get buffered() {
    return this.audio.length / this.rate;
  }

  /** Enough new audio for a step (feed would transcribe). */
  get due() {
    return this.fresh >= this.options.stepSeconds * this.rate;
  }

  /** Append `samples`; a step when `stepSeconds` of new audio came (one update), else none. */
  async feed(samples) {
    this.append(samples);
    return this.due ? [await this.step()] : [];
  }

  /** Re-transcribe the buffer now and confirm what two hypotheses agree on. */
  async step() {
    const agreed = this.agreement.agree(await this.hypothesis());
    const update = this.update(agreed);
    this.trim();
    return update;
  }

  /** The end of the stream: the audio not yet transcribed is, and every tentative word is confirmed. */
  async finish() {
    const agreed = this.fresh || !this.steps ? this.agreement.agree(await this.hypothesis()) : [];
    const rest = this.agreement.pending;
    this.agreement.confirm(rest, []);
    const update = this.update([...agreed, ...rest]);
    return Object.assign(update, { final: true, tentative: '' });
  }

  update(agreed) {
    const confirmed = joined(agreed);
    this.text += confirmed;
    return new StreamUpdate({ confirmed, tentative: joined(this.agreement.pending), text: this.text, words: agreed,
      language: this.language });
  }

  /** The buffer transcribed: its words in stream seconds (its segments kept for trimming). */
  async hypothesis() {
    this.fresh = 0;
    this.steps += 1;
    if (!this.audio.length) {
      this.segments = [];
      return [];
    }
    const kept = this.options.promptChars;
    const prompt = [this.initial, kept ? this.context.slice(-kept).trim() : ''].filter(Boolean).join(' ') || null;
    const result = await transcribe(this.ort, this.model, this.audio, { ...this.transcribeOptions,
      language: this.language, task: this.task, timestamps: true, prompt, maxSeconds: null, wordTimestamps: this.timed });
    if (this.language === null && result.text.trim() && this.agreement.pending.length) this.language = result.language;
    this.segments = result.segments.map((s) => segmentWords(s, this.offset, this.timed));
    return this.segments.flatMap((s) => s.words);
  }

  /** Keep the buffer short (Python's _trim). */
  trim() {
    if (this.buffered <= this.trimSeconds) return;
    const { confirmed, pending } = this.agreement;
    const cut = this.segmentCut();
    if (cut) this.cut(...cut);
    else if (this.buffered > this.windowSeconds && confirmed.length) this.cut(confirmed.length, this.agreement.lastEnd);
    else if (!pending.length && !confirmed.length) this.cut(0, this.offset + this.buffered - this.options.stepSeconds);
    else if (this.buffered > 2 * this.windowSeconds) this.force(this.offset + this.buffered - this.windowSeconds);
  }

  /** [confirmed words before it, where] the buffer can be cut: in the pause after the last segment (but the
   * hypothesis's last) whose words are all confirmed; null when there is none. */
  segmentCut() {
    if (!this.agreement.matched) return null;
    const confirmed = this.agreement.confirmed.length;
    let [seen, cut] = [0, null];
    for (let i = 0; i + 1 < this.segments.length; i++) {
      const [segment, following] = [this.segments[i], this.segments[i + 1]];
      seen += segment.words.length;
      if (seen > confirmed) break;
      if (segment.words.length) cut = [seen, (segment.end + Math.max(following.start, segment.end)) / 2];
    }
    return cut;
  }

  /** Two windows without agreement (noise): confirm the tentative words before `seconds`. */
  force(seconds) {
    const forced = this.agreement.pending.filter((w) => w.end <= seconds);
    this.text += joined(forced);
    this.agreement.confirm(forced, this.agreement.pending.slice(forced.length));
    this.cut(this.agreement.confirmed.length, seconds);
  }

  /** Drop the buffer's audio before `seconds` (stream time) and its first `words` confirmed words (prompt now). */
  cut(words, seconds) {
    const drop = Math.min(this.audio.length, Math.max(0, roundHalfEven((seconds - this.offset) * this.rate)));
    const gone = joined(this.agreement.confirmed.slice(0, words));
    const chars = this.options.promptChars;
    this.context = chars ? (this.context + gone).slice(-chars - 1) : '';
    this.audio = this.audio.slice(drop);
    this.offset += drop / this.rate;
    this.agreement.forget(words, this.offset);
  }
}

/** ExportedModel.streamTranscribe (Python's stream_transcribe): each chunk fed as it comes (an iterable or async
 * iterable of Float32Array), then the final update. */
export async function* streamTranscribe(ort, model, chunks, options = {}) {
  const stream = new StreamTranscriber(ort, model, options);
  for await (const chunk of chunks) yield* await stream.feed(chunk);
  yield await stream.finish();
}
