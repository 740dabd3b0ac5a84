// Whisper's log-mel features in JS: the port of tfm_export/audio/features.py (numpy), which equals
// transformers' WhisperFeatureExtractor. The recipe: pad or trim the samples to one window, STFT with
// a periodic Hann window and reflect padding (center=True), power spectrum, drop the last frame,
// Slaney mel filters, log10 of max(mel, 1e-10), clamp at (the window's max - 8), then (x + 4) / 4.
// Float64 inside (as numpy), float32 out, laid out (n_mels, frames) row-major: the encoder's input.
//
// The settings are the export's manifest `features` section (preprocessor_config.json's keys). A
// Whisper folder's preprocessor_config.json does not store the mel filter bank (transformers rebuilds
// it from these settings too), so `melFilters` builds it here with Python's formula, in float64.
//
// The power spectra are spectrum.mjs's (fft.js for powers of two; Whisper's n_fft 400 by a mixed-radix
// FFT). No globals beyond ECMAScript: a page can import it.
import { powerSpectrum } from './spectrum.mjs';

export { powerSpectrum }; // it lived here first

const LOG_FLOOR = 1e-10; // mel power floor before log10 (-100 dB)
const DYNAMIC_RANGE = 8; // log10 units kept below the loudest value (80 dB)
// The Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per factor 6.4).
const MIN_LOG_HZ = 1000;
const MIN_LOG_MEL = 15;
const LOG_STEP = Math.log(6.4) / 27;

/**
 * The feature settings of an export (its manifest's `features`: preprocessor_config.json's keys), or
 * one line saying the export is not a Whisper (log-mel) speech model.
 */
export function featureConfig(manifest) {
  const f = manifest?.features;
  if (!f) {
    throw new Error('this export is not a Whisper speech model (its manifest has no `features`: its encoder reads ' +
      'token ids); transcribe needs a Whisper export: use generate or translate for text');
  }
  const config = {
    nMels: f.feature_size ?? 80, samplingRate: f.sampling_rate ?? 16000, hopLength: f.hop_length ?? 160,
    nFft: f.n_fft ?? 400, chunkLength: f.chunk_length ?? 30, paddingValue: f.padding_value ?? 0,
  };
  for (const [key, value] of Object.entries(config)) {
    if (key !== 'paddingValue' && !(Number.isInteger(value) && value > 0)) {
      throw new Error(`manifest.json features: ${key} must be a positive integer, got ${JSON.stringify(value)}; re-export the model`);
    }
  }
  config.nSamples = config.chunkLength * config.samplingRate; // one window's samples
  config.nbMaxFrames = Math.floor(config.nSamples / config.hopLength); // one window's frames
  return config;
}

function hzToMel(hz) {
  return hz >= MIN_LOG_HZ ? MIN_LOG_MEL + Math.log(hz / MIN_LOG_HZ) / LOG_STEP : (3 * hz) / 200;
}

function melToHz(mel) {
  return mel >= MIN_LOG_MEL ? MIN_LOG_HZ * Math.exp(LOG_STEP * (mel - MIN_LOG_MEL)) : (200 * mel) / 3;
}

/** numpy's linspace(start, stop, num): start + i * step, the last point exactly `stop`. */
function linspace(start, stop, num) {
  const step = (stop - start) / (num - 1);
  return Float64Array.from({ length: num }, (_, i) => (i === num - 1 ? stop : start + i * step));
}

/**
 * (nMels * nFreqs) float64, row m = mel bin m: Slaney-scale triangles from 0 Hz to Nyquist, each
 * divided by its width (librosa's norm="slaney"), as features.py's mel_filters.
 */
export function melFilters(nMels, nFft, samplingRate) {
  const nFreqs = Math.floor(nFft / 2) + 1;
  const edges = linspace(hzToMel(0), hzToMel(samplingRate / 2), nMels + 2).map(melToHz);
  const freqs = linspace(0, Math.floor(samplingRate / 2), nFreqs);
  const filters = new Float64Array(nMels * nFreqs);
  for (let m = 0; m < nMels; m++) {
    const area = 2 / (edges[m + 2] - edges[m]); // Slaney: about equal energy per filter
    for (let f = 0; f < nFreqs; f++) {
      const rising = -(edges[m] - freqs[f]) / (edges[m + 1] - edges[m]);
      const falling = (edges[m + 2] - freqs[f]) / (edges[m + 2] - edges[m + 1]);
      filters[m * nFreqs + f] = Math.max(0, Math.min(rising, falling)) * area;
    }
  }
  return filters;
}

/** (n,) periodic Hann (torch.hann_window's default): 0.5 - 0.5 cos(2 pi i / n). */
export function hannWindow(n) {
  return Float64Array.from({ length: n }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / n));
}

/** The samples as float32 (as Python's as_samples), checked: one line for empty or non-finite audio. */
function asSamples(samples) {
  const out = samples instanceof Float32Array ? samples : Float32Array.from(samples);
  if (out.length === 0) throw new Error('the audio holds no samples; pass a recording that is not empty');
  for (let i = 0; i < out.length; i++) { // a loop, not every(Number.isFinite): a window is 480,000 samples
    if (!Number.isFinite(out[i])) throw new Error('the audio holds NaN or infinite samples; re-export the recording');
  }
  return out;
}

/** The samples with n / 2 reflected at each end (numpy's pad mode "reflect": the edge not repeated). */
function reflectPad(samples, half) {
  const n = samples.length;
  if (n <= half) throw new Error(`the audio is ${n} samples long, too short to analyse (more than ${half} needed)`);
  const out = new Float32Array(n + 2 * half);
  out.set(samples, half);
  for (let i = 1; i <= half; i++) {
    out[half - i] = samples[i];
    out[half + n - 1 + i] = samples[n - 1 - i];
  }
  return out;
}

/**
 * Each mel filter's non-zero span [from, to) of frequency bins: a Slaney triangle covers a few bins of
 * n_fft / 2 + 1, so the filter bank product skips the rest (adding their +0 terms changes no sum).
 */
function filterSpans(filters, nMels, nFreqs) {
  return Array.from({ length: nMels }, (_, m) => {
    const row = filters.subarray(m * nFreqs, (m + 1) * nFreqs);
    const from = row.findIndex((w) => w !== 0);
    return from < 0 ? [0, 0] : [from, row.findLastIndex((w) => w !== 0) + 1];
  });
}

/** Whether samples [from, from + n) are all zero: the padding of a short recording, whose power is exactly 0. */
function silent(samples, from, n) {
  for (let i = from; i < from + n; i++) if (samples[i] !== 0) return false;
  return true;
}

/** (nMels * frames) float32, frames = samples / hopLength: the samples as they are (no window padding). */
export function logMelSpectrogram(samples, config) {
  const { nFft, hopLength, nMels, samplingRate } = config;
  const padded = reflectPad(asSamples(samples), Math.floor(nFft / 2)); // frame t centred on sample t * hop
  const frames = Math.floor((padded.length - nFft) / hopLength); // the last frame dropped, as Whisper does
  const window = hannWindow(nFft);
  const nFreqs = Math.floor(nFft / 2) + 1;
  const filters = melFilters(nMels, nFft, samplingRate);
  const spans = filterSpans(filters, nMels, nFreqs);
  const power = powerSpectrum(nFft);
  const zeros = new Float64Array(nFreqs); // an all-zero frame's spectrum, without its FFT
  const frame = new Float64Array(nFft);
  const logMel = new Float64Array(nMels * frames);
  let top = -Infinity;
  for (let t = 0; t < frames; t++) {
    const at = t * hopLength;
    let spectrum = zeros;
    if (!silent(padded, at, nFft)) {
      for (let i = 0; i < nFft; i++) frame[i] = padded[at + i] * window[i];
      spectrum = power(frame);
    }
    for (let m = 0; m < nMels; m++) {
      let mel = 0;
      for (let f = spans[m][0], row = m * nFreqs; f < spans[m][1]; f++) mel += filters[row + f] * spectrum[f];
      const value = Math.log10(Math.max(mel, LOG_FLOOR));
      logMel[m * frames + t] = value;
      if (value > top) top = value;
    }
  }
  return Float32Array.from(logMel, (v) => (Math.max(v, top - DYNAMIC_RANGE) + 4) / 4);
}

/** (nSamples,) float32: the first window's samples, padded with paddingValue at the end. */
export function padOrTrim(samples, config) {
  const out = new Float32Array(config.nSamples).fill(config.paddingValue);
  out.set(asSamples(samples).subarray(0, config.nSamples));
  return out;
}

/** (nMels * nbMaxFrames) float32: WhisperFeatureExtractor()(samples)'s features (the first window). */
export function logMel(samples, config) {
  return logMelSpectrogram(padOrTrim(samples, config), config);
}
