// Speech in, text out: `transcribe` of an opened Whisper export, the port of
// tfm_export/runtime/speech/whisper.py (issue #43). The steps, as transformers' WhisperForConditionalGeneration.generate:
// 1. the audio (a WAV file's bytes, or float32 samples at the model's rate) -> mono samples
//    (audio/io.mjs: decoded, channels averaged, resampled);
// 2. log-mel features (audio/features.mjs; the manifest's `features`): up to one window (30 s) padded to
//    the window; longer audio keeps all its frames and is decoded window by window (speech/longform.mjs);
// 3. the forced prompt (speech/prompt.mjs's initTokens); a language not given is detected on the first
//    window at the step that feeds <|startoftranscript|>, as Python's LanguageDetector does;
// 4. greedy or beam search in each window through decode/loop.mjs's driver with Whisper's processors
//    (speech/search.mjs); long audio always decodes with timestamps (and seeks on them), as Python and
//    transformers do.
// The temperature fallback and the silence test (speech/fallback.mjs: `temperature` [0, 0.2, ...], `seed`, the
// thresholds over the folder's) decide each window as Python's do, sampled tries drawing Python's SplitMix64
// numbers; the folder's (or the call's) conditionOnPrevTokens conditions each window on the text before it
// (promptConditionType 'all-segments': after the initial prompt); faster-whisper's `hotwords` and `prefix` as
// Python's. `assistant` (an opened Whisper export of the same tokenizer) or `promptLookupNumTokens`: greedy windows
// decode speculatively (speech/assisted.mjs: the same ids). Not ported: per-token logprobs. The result is Python's: { text,
// language, segments, ids }; speech/subtitles.mjs writes its segments as subtitles. No Node APIs: the browser
// page can import it (exported.mjs reads files and passes their bytes).
import { readWav } from '../audio/io.mjs';
import { featureConfig, logMel, logMelSpectrogram } from '../audio/features.mjs';
import { generationConfig } from '../options/generation.mjs';
import { GrowingCache } from '../states/growing.mjs';
import { assistedDecoder, speculating } from './assisted.mjs';
import { fallbackFor } from './fallback.mjs';
import { cacheRunner, featureWindow, transcribeWindows, windowDecoder, windowPrompt } from './longform.mjs';
import { DETECT, initTokens, languageCode, whisperSettings } from './prompt.mjs';
import { promptParts } from './prompt_text.mjs';
import { LanguageDetector } from './search.mjs';
import { addWords, alignmentSession, timeWindow } from './words.mjs';

const OPTIONS = ['language', 'task', 'timestamps', 'numBeams', 'prompt', 'maxNewTokens', 'wordTimestamps', 'temperature',
  'seed', 'compressionRatioThreshold', 'logprobThreshold', 'noSpeechThreshold', 'conditionOnPrevTokens',
  'promptConditionType', 'hotwords', 'prefix', 'assistant', 'promptLookupNumTokens', 'numAssistantTokens', 'speculation',
  'maxSeconds', 'label', 'runner'];
const DEFAULT_MAX_SECONDS = 3600; // Python's: an hour, not a mistaken path to a day of audio

/** The audio as float32 samples at `rate`: WAV bytes decoded (and resampled), samples as they are. */
export function audioSamples(audio, rate, label = 'the audio bytes') {
  if (audio instanceof Float32Array) return audio; // samples already at the model's rate (Python's ndarray)
  if (audio instanceof Uint8Array || audio instanceof ArrayBuffer) return readWav(new Uint8Array(audio), rate, label);
  throw new Error(`audio must be a WAV file's bytes (Uint8Array, Buffer, ArrayBuffer) or a Float32Array of samples ` +
    `at ${rate} Hz, got ${audio?.constructor?.name ?? typeof audio}`);
}

/** The checked options, with Python's English-only rule: such a model takes no language or task. */
function speechOptions(settings, { language = null, task = 'transcribe', numBeams = 1, ...rest }) {
  const unknown = Object.keys(rest).filter((name) => !OPTIONS.includes(name));
  if (unknown.length) throw new Error(`unknown transcribe option ${JSON.stringify(unknown[0])}; known: ${OPTIONS.slice(0, -2).join(', ')}`);
  if (task !== null && !['transcribe', 'translate'].includes(task)) {
    throw new Error(`task must be one of transcribe, translate, got ${JSON.stringify(task)}`);
  }
  if (!Object.keys(settings.lang_to_id ?? {}).length) {
    if (task === 'translate') throw new Error('this Whisper model is English-only: it cannot translate; leave out task');
    if (language !== null && !['en', 'english'].includes(String(language).toLowerCase().replace(/^<\|(.*)\|>$/, '$1'))) {
      throw new Error('this Whisper model is English-only: it takes no language');
    }
    return { ...rest, language: null, task: null, numBeams };
  }
  return { ...rest, language, task, numBeams };
}

/** The recording's features: one padded window, or all frames of a longer one (`long`), as Python. */
function recordingFeatures(audio, config, { label = 'the audio', maxSeconds = DEFAULT_MAX_SECONDS }) {
  const samples = audioSamples(audio, config.samplingRate, label);
  const seconds = samples.length / config.samplingRate;
  if (maxSeconds !== null && seconds > maxSeconds) {
    throw new Error(`${label} is ${seconds.toFixed(1)} s long, over the limit of ${maxSeconds} s (maxSeconds); ` +
      'split the recording or raise maxSeconds');
  }
  const long = samples.length > config.nSamples;
  const features = long ? logMelSpectrogram(samples, config) : logMel(samples, config);
  return { features, total: features.length / config.nMels, long, seconds,
    frames: Math.ceil(samples.length / config.hopLength) }; // the audio's own frames (the alignment's crop)
}

/** Python's refusal before decoding with timestamps: a model without them. */
function checkTimestamps(settings, long) {
  if (settings.no_timestamps_token_id === undefined || settings.no_timestamps_token_id === null) {
    throw new Error(`this Whisper model has no timestamp tokens (no_timestamps_token_id): ${long
      ? 'it cannot transcribe audio over one window' : 'it takes no timestamps'}`);
  }
}

/** The init tokens with a language to detect detected on the first window alone, as Python does for a prompted
 * decode (the prompt comes before <|startoftranscript|>, where an unprompted decode detects by itself). */
async function detectFirst(runWindow, settings, init, { features, nMels, total, windowFrames }) {
  const detector = new LanguageDetector(settings);
  const first = featureWindow(features, nMels, total, 0, Math.min(total, windowFrames), windowFrames);
  await runWindow(first, detector);
  return init.map((t) => (t === DETECT ? detector.found : t));
}

/**
 * One recording -> { text, language, segments: [{ seek, start, end, text, tokens, temperature, avg_logprob,
 * compression_ratio, no_speech_prob }], ids } as Python's
 * `open_export(OUT).transcribe(audio, ...)`. `audio`: a WAV file's bytes or float32 samples at the
 * model's rate; options: language (a code "de", a name "german", a token "<|de|>"; default: detected),
 * task ("transcribe" or "translate"), timestamps (segments timed by the model), numBeams, prompt (an initial
 * prompt before every window: text the transcript is conditioned on, or its token ids),
 * maxNewTokens (per window), maxSeconds (default 3600; null: no limit), label (names the audio in errors);
 * assistant (an opened Whisper export of the same tokenizer: a smaller one, or the model itself) or
 * promptLookupNumTokens: greedy windows decode speculatively (speech/assisted.mjs: the same ids), the assistant
 * drafting numAssistantTokens at first; speculation (an object: its calls, drafted and accepted get the counts); runner
 * (what decodes each window, the language detection's included, as Python's `runner`: default decode/loop.mjs's run
 * on a cache of its own, one window at a time; speech/batch.mjs passes speech/batch_rounds.mjs's rounds).
 */
export async function transcribe(ort, model, audio, options = {}) {
  const settings = whisperSettings(model.manifest);
  const config = featureConfig(model.manifest);
  const { language, task, numBeams, timestamps = false, prompt = null, maxNewTokens: max = null,
    wordTimestamps = false, temperature = null, seed = 0, compressionRatioThreshold = null, logprobThreshold = null,
    noSpeechThreshold = null, conditionOnPrevTokens = null, promptConditionType = 'first-segment', hotwords = null,
    prefix: prefixText = null, runner = null, assistant = null, promptLookupNumTokens = null, numAssistantTokens = null,
    speculation = null, ...read } = speechOptions(settings, options);
  const fallback = fallbackFor(settings, { temperature, compressionRatioThreshold, logprobThreshold, noSpeechThreshold });
  const condition = Boolean(conditionOnPrevTokens ?? settings.condition_on_prev_tokens);
  if (!['first-segment', 'all-segments'].includes(promptConditionType)) {
    throw new Error(`promptConditionType must be "first-segment" or "all-segments", got ${JSON.stringify(promptConditionType)}`);
  }
  if (promptConditionType === 'all-segments' && !condition) throw new Error('promptConditionType "all-segments" needs conditionOnPrevTokens');
  const alignment = wordTimestamps ? await alignmentSession(model) : null; // refused before any decoding
  // Python's fresh GenerationConfig: not the folder's defaults
  const decoding = generationConfig(null, { numBeams, seed, promptLookupNumTokens, numAssistantTokens });
  const assisted = speculating(ort, model, decoding, assistant, runner, speculation ?? undefined);
  const { features, total, long, seconds, frames } = recordingFeatures(audio, config, read);
  const stamped = Boolean(timestamps) || long;
  if (stamped) checkTimestamps(settings, long);
  let init = initTokens(settings, language, task, stamped);
  const { promptIds: prefix, hotwordIds, prefixIds } = promptParts(model, settings, { prompt, hotwords, prefix: prefixText }, stamped);
  const first = promptConditionType === 'first-segment';
  const promptSegment = prefix.length && first ? [{ tokens: prefix.slice(1) }] : []; // the text conditioning starts from
  const promptFor = (segments, low, prefixed) => windowPrompt(settings, init, [...promptSegment, ...segments],
    condition && low, prefix, model.manifest.config.max_len, promptConditionType, prefixed ? [] : hotwordIds);
  const layout = { features, nMels: config.nMels, total, windowFrames: config.nbMaxFrames };
  const runWindow = runner ?? cacheRunner(new GrowingCache(ort, model));
  const ahead = prefix.length || hotwordIds.length || prefixIds.length; // the prompt's start is not <|startoftranscript|>
  // a speculative window is checked with its whole prompt: the language is detected first, as Python always does
  if ((ahead || assisted) && init.includes(DETECT)) init = await detectFirst(runWindow, settings, init, layout);
  const positions = { timestamps: stamped, max, maxTargetPositions: model.manifest.config.max_len };
  const decodeWindow = assistedDecoder(windowDecoder(runWindow, settings, decoding, { ...positions,
    onDetected: (p) => { init = p; } }), assisted, settings, positions);
  // The timestamp tokens' first id. As in Python and transformers, the ids a model emits from there on cut segments,
  // move seek and stay out of the text even when no timestamps were asked (the rules that place them are off then).
  const nts = settings.no_timestamps_token_id;
  const begin = nts === undefined || nts === null ? Infinity : nts + 1;
  const out = await transcribeWindows(features, { ...layout, timestampBegin: begin,
    vocabSize: model.manifest.config.tgt_vocab_size, eosId: settings.eos_token_id }, promptFor, decodeWindow, fallback,
    prefixIds);
  const textOf = (ids) => {
    const kept = ids.filter((t) => t < begin);
    return model.tokenizer ? model.tokenizer.decode(kept) : kept.join(' ');
  };
  const round = (x) => Math.round(x * 1000) / 1000;
  const segments = stamped ? out.segments : [{ start: 0, end: seconds, tokens: out.ids, window: out.windows[0] }];
  const code = languageCode(settings, init[1]) ?? (Object.keys(settings.lang_to_id ?? {}).length ? null : 'en');
  const result = { text: textOf(out.ids), language: code,
    segments: segments.map((s) => segmentFields(s, textOf(s.tokens), round)), ids: out.ids };
  if (alignment) {
    const found = await addWords({ segments, windows: out.windows, windowFrames: layout.windowFrames,
      audioFrames: Math.min(total, frames), decode: (ids) => model.tokenizer.decode(ids), eosId: settings.eos_token_id,
      language: code }, (window, crop) => timeWindow(ort, model, alignment, layout, window, crop));
    result.segments.forEach((s, n) => { s.words = found[n]; });
    result.words = found.flat();
  }
  return result;
}

/** A segment as Python's segment_fields (OpenAI's verbose_json, less its id): times, text, its ids (timestamps
 * included) and its window's seek, temperature, avg_logprob, compression_ratio and no_speech_prob. */
function segmentFields({ start, end, tokens, window }, text, round) {
  const { seek, temperature, avg_logprob, compression_ratio, no_speech_prob } = window;
  return { seek, start: round(start), end: round(end), text, tokens, temperature, avg_logprob, compression_ratio,
    no_speech_prob };
}
