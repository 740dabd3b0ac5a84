// Speech in, text out: `transcribe` of an opened Whisper export, the port of Python's
// tfm_export/runtime/speech.py for one window (issue #43). The steps, as transformers'
// WhisperForConditionalGeneration.generate:
// 1. the audio (a WAV file's bytes, or float32 samples at the model's rate) -> mono samples
//    (audio.mjs: decoded, channels averaged, resampled);
// 2. log-mel features of one window (features.mjs; the manifest's `features`);
// 3. the forced prompt (whisper.mjs's initTokens); a language not given is detected at the step that
//    feeds <|startoftranscript|>, as Python's LanguageDetector does on the same window;
// 4. greedy or beam search through decoding.mjs's driver with Whisper's processors.
// Not ported: long form (audio over one window is refused in one line), timestamps, an initial
// prompt, temperature fallback. The result is Python's `transcribe` without timestamps: { text,
// language, segments (one), ids }. No Node APIs: the browser page can import it (translate.mjs
// reads files and passes their bytes).
import { readWav } from './audio.mjs';
import { decodeFeatures, generationConfig } from './decoding.mjs';
import { featureConfig, logMel } from './features.mjs';
import { WhisperStrategy, initTokens, languageCode, maxNewTokens, whisperSettings } from './whisper.mjs';

const OPTIONS = ['language', 'task', 'numBeams', 'maxNewTokens', 'label'];

/** The audio as float32 samples at `rate`: WAV bytes decoded (and resampled), samples as they are. */
export function audioSamples(audio, rate, label = 'the audio bytes') {
  if (audio instanceof Float32Array) return audio; // samples already at the model's rate (Python's ndarray)
  if (audio instanceof Uint8Array || audio instanceof ArrayBuffer) return readWav(new Uint8Array(audio), rate, label);
  throw new Error(`audio must be a WAV file's bytes (Uint8Array, Buffer, ArrayBuffer) or a Float32Array of samples ` +
    `at ${rate} Hz, got ${audio?.constructor?.name ?? typeof audio}`);
}

/** The checked options, with Python's English-only rule: such a model takes no language or task. */
function speechOptions(settings, { language = null, task = 'transcribe', numBeams = 1, maxNewTokens: max = null, ...rest }) {
  const unknown = Object.keys(rest).filter((name) => !OPTIONS.includes(name));
  if (unknown.length) throw new Error(`unknown transcribe option ${JSON.stringify(unknown[0])}; known: ${OPTIONS.slice(0, -1).join(', ')}`);
  if (task !== null && !['transcribe', 'translate'].includes(task)) {
    throw new Error(`task must be one of transcribe, translate, got ${JSON.stringify(task)}`);
  }
  if (!Object.keys(settings.lang_to_id ?? {}).length) {
    if (task === 'translate') throw new Error('this Whisper model is English-only: it cannot translate; leave out task');
    if (language !== null && !['en', 'english'].includes(String(language).toLowerCase().replace(/^<\|(.*)\|>$/, '$1'))) {
      throw new Error('this Whisper model is English-only: it takes no language');
    }
    return { language: null, task: null, numBeams, maxNewTokens: max };
  }
  return { language, task, numBeams, maxNewTokens: max };
}

/** One window's features from the audio; a recording over one window is refused (long form is not ported). */
function windowFeatures(audio, config, label) {
  const samples = audioSamples(audio, config.samplingRate, label);
  if (samples.length > config.nSamples) {
    const seconds = (samples.length / config.samplingRate).toFixed(1);
    throw new Error(`${label} is ${seconds} s long, over this model's ${config.chunkLength} s window: long-form ` +
      'transcription is not done in Node yet; split the recording or use the Python runtime (tfm-export transcribe)');
  }
  return { features: logMel(samples, config), seconds: samples.length / config.samplingRate };
}

/**
 * One recording -> { text, language, segments: [{ start, end, text }], ids } as Python's
 * `open_export(OUT).transcribe(audio, ...)` without timestamps. `audio`: a WAV file's bytes or
 * float32 samples at the model's rate; options: language (a code "de", a name "german", a token
 * "<|de|>"; default: detected), task ("transcribe" or "translate"), numBeams, maxNewTokens, label
 * (names the audio in errors).
 */
export async function transcribe(ort, model, audio, options = {}) {
  const settings = whisperSettings(model.manifest);
  const config = featureConfig(model.manifest);
  const { language, task, numBeams, maxNewTokens: max } = speechOptions(settings, options);
  const decoding = generationConfig(null, { numBeams }); // Python's fresh GenerationConfig: not the folder's defaults
  const prompt = initTokens(settings, language, task);
  const { features, seconds } = windowFeatures(audio, config, options.label ?? 'the audio');
  const steps = maxNewTokens(settings, prompt.length, max, model.manifest.config.max_len);
  const strategy = new WhisperStrategy(prompt, steps, settings, decoding);
  const [[best]] = await decodeFeatures(ort, model, [features], strategy);
  const begin = settings.no_timestamps_token_id !== undefined && settings.no_timestamps_token_id !== null
    ? settings.no_timestamps_token_id + 1 : Infinity; // the timestamp tokens' first id
  const text = model.tokenizer ? model.tokenizer.decode(best.ids.filter((t) => t < begin)) : best.ids.join(' ');
  const code = languageCode(settings, strategy.prompt[1]) ?? (Object.keys(settings.lang_to_id ?? {}).length ? null : 'en');
  return { text, language: code, segments: [{ start: 0, end: Math.round(seconds * 1000) / 1000, text }], ids: best.ids };
}
