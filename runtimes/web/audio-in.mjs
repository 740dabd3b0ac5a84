// Audio into the page, as /lib/speech/whisper.mjs's transcribe takes it: a file dropped or chosen, or the
// microphone. A WAV file goes in as its bytes, so /lib/audio/io.mjs decodes (and, at another rate,
// resamples) it exactly as Node does: a 16 kHz WAV file gives Python's ids. Any other format the browser
// decodes (MP3, OGG, FLAC, WebM...) and the microphone become float32 samples at the model's rate,
// resampled by the browser (an OfflineAudioContext): close to Python's soxr, not bit-equal.

const RIFF = ['RIFF', 'RIFX', 'RF64'];

/** True for a RIFF/WAVE header (/lib/audio/io.mjs's own test: it then names a damaged file in one line). */
function isWav(bytes) {
  const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
  return bytes.length >= 12 && RIFF.includes(tag(0)) && tag(8) === 'WAVE';
}

/** The channels' mean (ffmpeg's `-ac 1`, as Python and /lib/audio/io.mjs mix). */
function mixToMono(buffer) {
  const channels = Array.from({ length: buffer.numberOfChannels }, (_, c) => buffer.getChannelData(c));
  if (channels.length === 1) return channels[0];
  return Float32Array.from(channels[0], (_, i) => channels.reduce((sum, c) => sum + c[i], 0) / channels.length);
}

/** A dropped or chosen File -> a WAV file's bytes, or mono float32 samples at `rate` (another format). */
export async function fileAudio(file, rate) {
  const bytes = new Uint8Array(await file.arrayBuffer());
  if (!bytes.length) throw new Error(`${file.name} is empty (0 bytes); drop a recording`);
  if (isWav(bytes)) return bytes;
  // decodeAudioData on a context at `rate` decodes and resamples to that rate in one go
  const context = new OfflineAudioContext(1, 1, rate);
  try {
    return mixToMono(await context.decodeAudioData(bytes.buffer));
  } catch (err) {
    throw new Error(`${file.name}: this browser cannot decode it as audio (${err.message}); ` +
      'convert it to a WAV file (e.g. ffmpeg -i IN -ar 16000 OUT.wav)');
  }
}

/** float32 `samples` from `fromRate` to `toRate` Hz with the browser's resampler. */
export async function resample(samples, fromRate, toRate) {
  if (fromRate === toRate) return samples;
  const context = new OfflineAudioContext(1, Math.ceil((samples.length * toRate) / fromRate), toRate);
  const buffer = context.createBuffer(1, samples.length, fromRate);
  buffer.copyToChannel(samples, 0);
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  source.start();
  return (await context.startRendering()).getChannelData(0);
}

/**
 * A streaming resampler for the live text (`push` blocks as they come, `flush` at the end): a Hann-windowed
 * sinc low-passed below the lower rate's Nyquist (16 zero crossings a side), so 48 kHz -> 16 kHz has no
 * aliasing. Its output, block by block, is what it would be on the whole recording at once.
 */
export class StreamResampler {
  constructor(fromRate, toRate, zeros = 16) {
    this.step = fromRate / toRate; // input samples per output sample
    this.cutoff = 0.5 * Math.min(1, toRate / fromRate) * 0.95; // cycles per input sample
    this.half = Math.ceil(zeros / (2 * this.cutoff)); // input samples a side
    this.input = new Float32Array(0);
    this.base = 0; // the input index of input[0]
    this.seen = 0; // input samples pushed
    this.next = 0; // the next output sample's index
  }

  /** The output samples the input pushed so far allows (a Float32Array, maybe empty). */
  push(block) {
    const grown = new Float32Array(this.input.length + block.length);
    grown.set(this.input);
    grown.set(block, this.input.length);
    this.input = grown;
    this.seen += block.length;
    return this.drain(this.seen);
  }

  /** The rest: the last samples as if silence followed. */
  flush() {
    const last = Math.ceil(this.seen / this.step);
    this.input = Float32Array.from([...this.input, ...new Float32Array(2 * this.half + 1)]);
    return this.drain(Infinity, last);
  }

  drain(known, last = Infinity) {
    const out = [];
    const { step, cutoff, half } = this;
    for (;;) {
      const t = this.next * step;
      const right = Math.floor(t) + half;
      if (this.next >= last || right >= Math.min(known, this.base + this.input.length)) break;
      let sum = 0;
      for (let k = Math.max(0, Math.floor(t) - half + 1); k <= right; k++) {
        const d = t - k;
        const x = 2 * Math.PI * cutoff * d;
        const sinc = d === 0 ? 1 : Math.sin(x) / x;
        sum += this.input[k - this.base] * 2 * cutoff * sinc * (0.5 + 0.5 * Math.cos((Math.PI * d) / half));
      }
      out.push(sum);
      this.next += 1;
    }
    const keep = Math.max(0, Math.floor(this.next * step) - half); // what the next output still reads
    if (keep > this.base) {
      this.input = this.input.slice(keep - this.base);
      this.base = keep;
    }
    return Float32Array.from(out);
  }
}

/** The microphone's stream, or one line saying why there is none. */
async function microphone() {
  if (!navigator.mediaDevices?.getUserMedia) {
    throw new Error('this page cannot use a microphone here: browsers allow it on https:// and localhost only');
  }
  try {
    // no echo cancellation, noise suppression or gain control: the samples a recorded file would hold
    return await navigator.mediaDevices.getUserMedia({
      audio: { echoCancellation: false, noiseSuppression: false, autoGainControl: false },
    });
  } catch (err) {
    throw new Error(`no microphone (${err.name}: ${err.message}); allow this page to use one, or drop a file`);
  }
}

/**
 * A recording from the microphone: `Recorder.start()` opens it, `seconds` is how much is kept so far,
 * `stop(rate)` closes it and returns the samples (mono float32) resampled to `rate`. The audio is
 * captured at the device's own rate (a worklet: recorder-worklet.js) and resampled once at the end,
 * because not every browser connects a microphone to a context at another rate.
 */
export class Recorder {
  /** `live`: { rate, onChunk(samples) }: the audio also comes as it is recorded, resampled to `rate`
   * (StreamResampler), about every 100 ms; `stop` then sends the last chunk before it returns. */
  static async start(live = null) {
    // The context and its worklet first, then the microphone: the device starts when it opens, and what
    // it hears before the worklet listens is lost, and fetching the module is slow on a loaded machine.
    const context = new AudioContext();
    try {
      await context.audioWorklet.addModule('/recorder-worklet.js');
    } catch (err) {
      await context.close();
      throw new Error(`cannot start the recorder (${err.message})`);
    }
    let stream = null;
    try {
      stream = await microphone();
      return new Recorder(stream, context, live);
    } catch (err) {
      stream?.getTracks().forEach((track) => track.stop());
      await context.close();
      throw err;
    }
  }

  constructor(stream, context, live = null) {
    Object.assign(this, { stream, context, chunks: [], frames: 0, feed: live });
    // no outputs: the browser pulls the node anyway, and nothing is played back
    this.node = new AudioWorkletNode(context, 'tfm-recorder', { numberOfOutputs: 0 });
    if (live) Object.assign(live, { resampler: new StreamResampler(context.sampleRate, live.rate), held: [], count: 0 });
    this.node.port.onmessage = ({ data }) => {
      this.chunks.push(data);
      this.frames += data.length;
      if (live) this.liveBlock(data);
    };
    context.createMediaStreamSource(stream).connect(this.node);
  }

  /** A block to the live resampler; every 100 ms of output to `onChunk`. */
  liveBlock(block) {
    const live = this.feed;
    const out = live.resampler.push(block);
    live.held.push(out);
    live.count += out.length;
    if (live.count >= live.rate / 10) this.sendLive();
  }

  sendLive() {
    const live = this.feed;
    const chunk = new Float32Array(live.count);
    live.held.reduce((at, part) => { chunk.set(part, at); return at + part.length; }, 0);
    [live.held, live.count] = [[], 0];
    if (chunk.length) live.onChunk(chunk);
  }

  get seconds() {
    return this.frames / this.context.sampleRate;
  }

  async stop(rate) {
    this.stream.getTracks().forEach((track) => track.stop());
    this.node.port.onmessage = null;
    if (this.feed) {
      this.feed.held.push(this.feed.resampler.flush());
      this.feed.count += this.feed.held.at(-1).length;
      this.sendLive();
    }
    const { sampleRate } = this.context;
    await this.context.close();
    const samples = new Float32Array(this.frames);
    this.chunks.reduce((at, chunk) => { samples.set(chunk, at); return at + chunk.length; }, 0);
    if (!samples.length) throw new Error('the microphone gave no sound; check that it is not muted, and record again');
    return resample(samples, sampleRate, rate);
  }
}
