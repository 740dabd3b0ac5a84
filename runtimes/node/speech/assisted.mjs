// Speculative greedy decoding of Whisper's windows (transcribe's `assistant`, `promptLookupNumTokens`): the port of
// tfm_export/runtime/speech/assisted.py. A greedy window (temperature 0, one beam) decodes through
// decode/speculative.mjs's `speculate`, the text models' loop, rather than through decode/loop.mjs with a
// WhisperStrategy: a proposer drafts (prompt lookup over the window's decoder input, whose conditioning text repeats
// what the last window said, or a draft export of the same tokenizer: a smaller Whisper, or the model itself) and
// the model checks each draft in one decoder step. The check is decode/checking.mjs's ProcessorCheck with Whisper's
// processors (speech/rules.mjs's whisperProcessors, the list the WhisperStrategy's TokenPicker runs), each drafted
// position processed with the ids before it, so the timestamp rules hold as they do one id at a time and the ids
// are plain greedy's. The window's forced prompt is fed in the first step; its <|startoftranscript|> position's
// logits give P(<|nospeech|>), and the kept ids' log-probabilities the row's avgLogprob, as a WhisperStrategy's
// row (equal up to float rounding). Sampled tries (the fallback's temperatures above 0) decode as they always did.
// No globals beyond ECMAScript: a page can import it.
import { runtimeGraphs } from '../checks.mjs';
import { ProcessorCheck } from '../decode/checking.mjs';
import { Speculation, proposal, speculate, wanted } from '../decode/speculative.mjs';
import { GrowingCache, checksDrafts } from '../states/growing.mjs';
import { maxNewTokens } from './prompt.mjs';
import { noSpeechProb, whisperProcessors } from './rules.mjs';
import { DETECT, WhisperRow } from './search.mjs';

/**
 * What a speculative window needs (Python's Assisted): the model's checking cache and manifest, the decoding
 * options (promptLookupNumTokens / numAssistantTokens), the assistant (an opened export, or null for prompt lookup)
 * and its cache; `policies`: the model's draft-length policies, kept across windows and calls; `stats`: the
 * windows' counts summed (a Speculation).
 */
export class Assisted {
  constructor(cache, manifest, config, assistant, draftCache, policies, stats = new Speculation()) {
    Object.assign(this, { cache, manifest, config, assistant, draftCache, policies, stats });
  }

  /** One greedy window's WhisperRow, decoded speculatively: `window` its features, `prompt` its forced input. */
  async row(window, prompt, steps, settings, timestamps, forced = 0) {
    if (prompt.includes(DETECT)) throw new Error('speculative decoding needs the language first (detected before the window decodes)');
    const rules = whisperProcessors(settings, prompt.length - forced, timestamps);
    const check = new ProcessorCheck({ ...this.config, doSample: false, temperature: 1 }, steps,
      { eos_id: settings.eos_token_id }, { processors: rules });
    const { proposer, policy } = proposal(this.config, this.manifest, this.assistant, this.draftCache, this.policies);
    const stats = new Speculation();
    const ids = await speculate(this.cache, [], [window], proposer, policy, steps, this.manifest.config,
      { stats, check, prompt });
    for (const name of ['calls', 'drafted', 'accepted']) this.stats[name] = (this.stats[name] ?? 0) + stats[name];
    return windowRow(prompt, ids, stats.ended, check, settings);
  }
}

/** The WhisperRow a WhisperStrategy would make (Python's _row): avgLogprob from the kept ids' summed log p. */
function windowRow(prompt, ids, ended, check, settings) {
  const n = ids.length + (ended ? 1 : 0); // EOS counted, as the strategy's
  const sot = prompt.indexOf(settings.decoder_start_token_id);
  let noSpeech = null;
  if (sot >= 0 && check.first) {
    const { data, vocab } = check.first;
    noSpeech = noSpeechProb(data.subarray(sot * vocab, (sot + 1) * vocab), settings);
  }
  return new WhisperRow(ids, ended, [...prompt], noSpeech, n ? check.score / n : NaN);
}

/**
 * The Assisted decoding a transcribe call asks for (Python's `speculating`): null when none is asked, or when the
 * export's decoder cannot check drafts (a warning; the same ids); one line where it cannot be: beam search, a
 * window runner (speech/batch.mjs's rounds). `config`: the call's options (numBeams, promptLookupNumTokens,
 * numAssistantTokens); `stats`: a Speculation the windows' counts are added to.
 */
export function speculating(ort, model, config, assistant, runner, stats = new Speculation()) {
  if (!wanted(config, assistant)) return null;
  if (assistant && typeof assistant.manifest?.config !== 'object') {
    throw new Error('assistant takes an opened export (await openExport(DRAFT_DIR)), not ' +
      `${typeof assistant === 'string' ? 'a folder path' : JSON.stringify(assistant)}`);
  }
  if (config.numBeams > 1) {
    throw new Error(`speculative decoding (an assistant, prompt lookup) is greedy decoding's, not beam search's ` +
      `(${config.numBeams} beams): transcribe with numBeams 1`);
  }
  if (runner) {
    throw new Error('speculative decoding runs on the export\'s own cache, not on a window batch (a runner): leave out ' +
      'the assistant and prompt lookup');
  }
  if (runtimeGraphs(model.manifest).decoder !== 'decoder' || !checksDrafts(model.manifest)) {
    console.warn("warning: this export's decoder returns only the last position's logits (exported before " +
      'earlier_logits): transcribing without speculation (the same ids)');
    return null;
  }
  const draftCache = assistant && runtimeGraphs(assistant.manifest).decoder === 'decoder' ? new GrowingCache(ort, assistant) : null;
  model.draftLengths ??= new Map();
  return new Assisted(new GrowingCache(ort, model), model.manifest, config, assistant, draftCache, model.draftLengths, stats);
}

/**
 * `plain` (speech/longform.mjs's windowDecoder) with its greedy tries decoded speculatively by `assisted` (null:
 * `plain` itself); a sampled try (temperature > 0) stays `plain`'s. `max`: maxNewTokens per window.
 */
export function assistedDecoder(plain, assisted, settings, { timestamps, max = null, maxTargetPositions }) {
  if (!assisted) return plain;
  return async (window, prompt, temperature = 0, forced = 0) => {
    if (temperature > 0) return plain(window, prompt, temperature, forced);
    const steps = maxNewTokens(settings, prompt.length, max, maxTargetPositions);
    return assisted.row(window, [...prompt], steps, settings, timestamps, forced);
  };
}
