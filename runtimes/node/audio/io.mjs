// Audio in: a WAV file's bytes -> mono float32 samples at the model's rate (Python's
// tfm_export/audio/io.py for WAV). Decoding is wavefile's (PCM 8-32 bit, 32/64-bit float, A-law,
// mu-law, IMA ADPCM; RIFF, RIFX, RF64). Integer samples are scaled as libsndfile scales them (by
// 2^(bits-1), so that Node reads the very floats Python's soundfile reads); wavefile's own
// int-to-float conversion divides positive samples by 2^(bits-1) - 1, which would not. Channels are
// averaged (ffmpeg's `-ac 1`, as Python); another rate is resampled with wavefile's windowed-sinc
// interpolator after its low-pass filter: close to Python's soxr, not bit-equal (16 kHz recordings,
// Whisper's rate, are not resampled at all). No Node APIs: a page can import it (with wavefile).
import * as wavefile from 'wavefile';

// Node loads wavefile's CommonJS (UMD) build, whose exports are the default import; a bundler or an
// import map may load its ES module build (index.js), which has the named export.
const { WaveFile } = wavefile.WaveFile ? wavefile : wavefile.default;

const CONVERT = 'convert it to a PCM WAV file (e.g. ffmpeg -i IN -ar 16000 OUT.wav)';
// wavefile's bit depth codes of compressed formats -> its decoder to 16-bit PCM
const CODECS = { '8a': 'fromALaw', '8m': 'fromMuLaw', 4: 'fromIMAADPCM' };

/** The RIFF header's first bytes as text, to tell a WAV file from another kind of file in errors. */
function looksLikeWav(bytes) {
  const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
  return ['RIFF', 'RIFX', 'RF64'].includes(tag(0)) && tag(8) === 'WAVE';
}

/** wavefile's reader on `bytes`, or one line saying why there is none. */
function parse(bytes, label) {
  if (bytes.length === 0) throw new Error(`${label} is empty (0 bytes); pass a WAV recording`);
  if (!looksLikeWav(bytes)) throw new Error(`${label} is not a WAV file; ${CONVERT}`);
  const wav = new WaveFile();
  try {
    wav.fromBuffer(bytes);
    if (CODECS[wav.bitDepth]) wav[CODECS[wav.bitDepth]]('16');
  } catch (err) {
    throw new Error(`${label} is a damaged or unsupported WAV file (${err.message}); ${CONVERT}`);
  }
  return wav;
}

/** One channel's raw samples -> floats in [-1, 1] as libsndfile gives them. */
function toFloat(raw, bitDepth) {
  if (bitDepth === '32f' || bitDepth === '64') return Float32Array.from(raw);
  const bits = Number.parseInt(bitDepth, 10);
  if (bits === 8) return Float32Array.from(raw, (v) => (v - 128) / 128); // 8-bit WAV is unsigned
  const scale = 2 ** (bits - 1);
  return Float32Array.from(raw, (v) => v / scale);
}

/** (frames,) float32: the channels' mean (one channel: itself). */
function mixToMono(channels) {
  if (channels.length === 1) return channels[0];
  return Float32Array.from(channels[0], (_, i) => channels.reduce((sum, c) => sum + c[i], 0) / channels.length);
}

/** `samples` (float32) from `fromRate` to `toRate` Hz: wavefile's sinc interpolation with its low-pass filter. */
export function resample(samples, fromRate, toRate) {
  if (fromRate === toRate) return samples;
  const wav = new WaveFile();
  wav.fromScratch(1, fromRate, '64', Float64Array.from(samples)); // float64: no requantising in between
  wav.toSampleRate(toRate, { method: 'sinc' });
  return Float32Array.from(wav.getSamples());
}

/** A WAV file's bytes -> { samples: its channels' mean as float32, sampleRate }; one line when unreadable. */
export function decodeWav(bytes, label = 'the audio bytes') {
  const wav = parse(bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes), label);
  const { numChannels, sampleRate } = wav.fmt;
  let raw = wav.getSamples(false, Float64Array);
  raw = numChannels === 1 ? [raw] : raw;
  if (!raw.length || raw[0].length === 0) throw new Error(`${label} holds no audio samples; pass a recording that is not empty`);
  const samples = mixToMono(raw.map((channel) => toFloat(channel, wav.bitDepth)));
  if (!samples.every(Number.isFinite)) throw new Error(`${label} holds NaN or infinite samples; re-export the recording`);
  return { samples, sampleRate };
}

/** A WAV file's bytes -> (samples,) float32 mono at `samplingRate` (resampled when the file has another rate). */
export function readWav(bytes, samplingRate, label) {
  const { samples, sampleRate } = decodeWav(bytes, label);
  return resample(samples, sampleRate, samplingRate);
}
