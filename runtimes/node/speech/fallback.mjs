// Whisper's temperature fallback and silence skipping: the port of tfm_export/runtime/speech/fallback.py
// (transformers' `_need_fallback`). A window is decoded at temperatures[0]; when the try's compression ratio
// exceeds compressionRatioThreshold, or its avgLogprob is below logprobThreshold, it is decoded again at the
// next temperature (the last try stays); a try below logprobThreshold whose P(<|nospeech|>) exceeds
// noSpeechThreshold is silence: the window is skipped. A temperature above 0 samples with decode/sampling.mjs's
// SplitMix64 from the config's seed, so a seeded fallback gives Python's ids. `fallbackFor` takes a call's
// options over the folder's thresholds (the manifest's speech settings), as Python's fallback_for.
// No globals beyond ECMAScript: a page can import it.

export const OPENAI_TEMPERATURES = Object.freeze([0, 0.2, 0.4, 0.6, 0.8, 1]); // Python's OPENAI_TEMPERATURES

const given = (v) => v !== undefined && v !== null;

/** Temperature fallback and silence skipping (Python's Fallback; a threshold null: off). */
export class Fallback {
  constructor({ temperatures = [0], compressionRatioThreshold = null, logprobThreshold = null,
    noSpeechThreshold = null } = {}) {
    if (!temperatures.length) throw new Error('temperature needs at least one temperature');
    const bad = temperatures.find((t) => typeof t !== 'number' || !Number.isFinite(t) || t < 0);
    if (bad !== undefined) throw new Error(`temperature values must be numbers of 0 or more, got ${JSON.stringify(bad)}`);
    if (given(noSpeechThreshold) && !given(logprobThreshold)) {
      throw new Error('noSpeechThreshold needs a logprobThreshold (a silent window is one whose average ' +
        'log-probability is below it)');
    }
    Object.assign(this, { temperatures: [...temperatures], compressionRatioThreshold, logprobThreshold,
      noSpeechThreshold });
  }

  /**
   * { needs (fallback), skip (the window) } for a try's { compressionRatio, avgLogprob (NaN: none generated),
   * noSpeechProb }, as Python's judge.
   */
  judge({ compressionRatio, avgLogprob, noSpeechProb }) {
    let needs = given(this.compressionRatioThreshold) && compressionRatio > this.compressionRatioThreshold;
    let skip = false;
    if (given(this.logprobThreshold)) {
      const low = avgLogprob < this.logprobThreshold; // NaN: not low, as Python's comparison
      needs = needs || low;
      if (given(this.noSpeechThreshold) && low && noSpeechProb > this.noSpeechThreshold) [needs, skip] = [false, true];
    }
    return { needs, skip };
  }
}

/** `temperature` as Python's temperatures_of: null (greedy), one number, or the fallback's list. */
export function temperaturesOf(temperature) {
  if (!given(temperature)) return [0];
  if (Array.isArray(temperature)) return temperature;
  if (typeof temperature === 'number') return [temperature];
  throw new Error(`temperature must be a number or an array of numbers, got ${JSON.stringify(temperature)}`);
}

/**
 * The Fallback of a call (Python's fallback_for): its temperatures, and each threshold given or else the
 * folder's (`settings`: speech/prompt.mjs's whisperSettings; its noSpeechThreshold only with a logprobThreshold).
 */
export function fallbackFor(settings, { temperature = null, compressionRatioThreshold = null, logprobThreshold = null,
  noSpeechThreshold = null } = {}) {
  const logprob = given(logprobThreshold) ? logprobThreshold : settings.logprob_threshold ?? null;
  let noSpeech = noSpeechThreshold;
  if (!given(noSpeech) && given(logprob)) noSpeech = settings.no_speech_threshold ?? null;
  const ratio = given(compressionRatioThreshold) ? compressionRatioThreshold : settings.compression_ratio_threshold ?? null;
  return new Fallback({ temperatures: temperaturesOf(temperature), compressionRatioThreshold: ratio,
    logprobThreshold: logprob, noSpeechThreshold: noSpeech });
}
