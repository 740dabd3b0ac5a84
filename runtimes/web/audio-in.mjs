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
  static async start() {
    const stream = await microphone();
    const context = new AudioContext();
    try {
      await context.audioWorklet.addModule('/recorder-worklet.js');
    } catch (err) {
      stream.getTracks().forEach((track) => track.stop());
      await context.close();
      throw new Error(`cannot start the recorder (${err.message})`);
    }
    return new Recorder(stream, context);
  }

  constructor(stream, context) {
    Object.assign(this, { stream, context, chunks: [], frames: 0 });
    // no outputs: the browser pulls the node anyway, and nothing is played back
    this.node = new AudioWorkletNode(context, 'tfm-recorder', { numberOfOutputs: 0 });
    this.node.port.onmessage = ({ data }) => { this.chunks.push(data); this.frames += data.length; };
    context.createMediaStreamSource(stream).connect(this.node);
  }

  get seconds() {
    return this.frames / this.context.sampleRate;
  }

  async stop(rate) {
    this.stream.getTracks().forEach((track) => track.stop());
    this.node.port.onmessage = null;
    const { sampleRate } = this.context;
    await this.context.close();
    const samples = new Float32Array(this.frames);
    this.chunks.reduce((at, chunk) => { samples.set(chunk, at); return at + chunk.length; }, 0);
    if (!samples.length) throw new Error('the microphone gave no sound; check that it is not muted, and record again');
    return resample(samples, sampleRate, rate);
  }
}
