// Whisper decoding for decode/loop.mjs's one loop (the Strategy protocol): the port of
// tfm_export/runtime/speech/search.py. `WhisperStrategy` wraps a core strategy (decode/strategies.mjs's
// TokenPicker for greedy decoding, decode/beam.mjs's BeamSearch) and owns what is not a rule over the
// scores: the forced decoder prompt (speech/prompt.mjs: an initial prompt, then <|startoftranscript|>,
// language, task, <|notimestamps|>) fed one token per step; at the step that fed <|startoftranscript|>
// the detected language (a DETECT slot) and P(<|nospeech|>); and the window's best row (`windowRow`).
// From the first generated position on the inner strategy chooses, with the (detected) prompt as its
// `prompt` (the processors' history) and Whisper's rules (speech/rules.mjs's whisperProcessors) in its
// `processors`, after the generic processors. `whisperStrategy` builds the pair. Node decodes one
// source (one window) per strategy: its rows are that source's beams, or one row.
// No globals beyond ECMAScript: a page can import it.
import { BeamSearch } from '../decode/beam.mjs';
import { TokenPicker } from '../decode/strategies.mjs';
import { DETECT } from './prompt.mjs';
import { detectLanguage, noSpeechProb, whisperProcessors } from './rules.mjs';

export { DETECT }; // Python's search.DETECT; the prompt (speech/prompt.mjs's initTokens) marks the slot

/**
 * One step on <|startoftranscript|> alone: the language it detects (`found`), as Python's LanguageDetector and
 * transformers' detect_language. A decode without an initial prompt detects at its own first step
 * (WhisperStrategy's DETECT slot); one with a prompt feeds the prompt first, so it detects here, beforehand.
 */
export class LanguageDetector {
  constructor(settings) {
    Object.assign(this, { settings, rows: 1, reads: 'logits', bosId: settings.decoder_start_token_id, finished: false });
    this.found = null;
  }

  advance(state) {
    const { data, vocab } = state.logits();
    this.found = detectLanguage(data.subarray(0, vocab), this.settings);
    this.finished = true;
    return { ids: [this.bosId], beamIdx: null };
  }

  results() {
    return [[{ ids: [], score: 0 }]];
  }
}

/**
 * One decoded row of a window (Python's WhisperRow): `ids` generated (timestamps included, EOS not), whether
 * it `ended` with EOS, its forced `prompt` (the detected language filled in), `noSpeechProb` (P(<|nospeech|>)
 * at <|startoftranscript|>; null: none) and `avgLogprob` (mean log-probability per generated id, EOS counted;
 * NaN: none).
 */
export class WhisperRow {
  constructor(ids, ended, prompt, noSpeechProb, avgLogprob) {
    Object.assign(this, { ids, ended, prompt, noSpeechProb, avgLogprob });
  }
}

/**
 * A core strategy (`inner`: TokenPicker or BeamSearch of one source) after Whisper's forced `prompt`, with
 * language detection and <|nospeech|> (Python's WhisperStrategy). A `DETECT` slot of the prompt gets the
 * detected language; the inner strategy's `prompt` is set to it: build the inner strategy with the
 * processors for this prompt's length (`whisperStrategy` does).
 */
export class WhisperStrategy {
  constructor(prompt, settings, inner) {
    Object.assign(this, { prompt: [...prompt], settings, inner, fed: 0, noSpeechProb: null });
    inner.prompt = this.prompt;
    Object.assign(this, { rows: inner.rows, reads: 'logits', bosId: prompt[0] });
    this.sotPos = prompt.indexOf(settings.decoder_start_token_id);
    this.finished = inner.steps === 0;
  }

  get steps() { return this.inner.steps; } // the inner strategy's budget of generated ids (the prompt not counted)

  get config() { return this.inner.config; }

  /** The next prompt token of every row while the prompt is fed, then the inner strategy's step. */
  advance(state) {
    if (this.fed < this.prompt.length) {
      if (this.fed === this.sotPos) this.atStart(state);
      this.fed += 1;
      if (this.fed < this.prompt.length) return { ids: Array(this.rows).fill(this.prompt[this.fed]), beamIdx: null };
    }
    const out = this.inner.advance(state); // this step's logits are the first generated token's
    this.finished = this.inner.finished;
    return out;
  }

  /**
   * The step that fed <|startoftranscript|> (every row fed the same prompt: row 0 speaks for all): the
   * language when it is to be detected, and P(<|nospeech|>) (speech/rules.mjs), which the long-form
   * loop's silence test reads.
   */
  atStart(state) {
    const { data, vocab } = state.logits();
    const row = data.subarray(0, vocab);
    this.noSpeechProb = noSpeechProb(row, this.settings);
    if (!this.prompt.includes(DETECT)) return;
    const found = detectLanguage(row, this.settings);
    this.prompt = this.prompt.map((t) => (t === DETECT ? found : t));
    this.inner.prompt = this.prompt;
  }

  /** The best hypothesis' generated ids as decoded: EOS last when it ended with one. */
  decoded() {
    const { inner } = this;
    if (inner.step === 0) return [];
    if (inner instanceof BeamSearch) return inner.slots[0][0].ids;
    const row = inner.out[0];
    const eos = row.indexOf(this.settings.eos_token_id);
    return eos >= 0 ? row.slice(0, eos + 1) : row;
  }

  /**
   * The best hypothesis' mean log-probability per generated token, EOS counted (Python's WhisperRow
   * avg_logprob: greedy sums log_softmax of the processed scores; beam search undoes the length penalty).
   */
  avgLogprob() {
    const n = this.decoded().length;
    if (!n) return NaN;
    if (this.inner instanceof BeamSearch) return (this.inner.slots[0][0].score * n ** this.config.lengthPenalty) / n;
    return this.inner.scored ? this.inner.scores[0] / n : NaN;
  }

  /** The window's best row as speech/longform.mjs reads it: a WhisperRow. */
  windowRow() {
    const decoded = this.decoded();
    const ended = decoded.length > 0 && decoded.at(-1) === this.settings.eos_token_id;
    return new WhisperRow(ended ? decoded.slice(0, -1) : [...decoded], ended, [...this.prompt], this.noSpeechProb,
      this.avgLogprob());
  }

  /** [[{ ids (generated, without EOS), score }]]: the best hypothesis of the one source. */
  results() {
    return this.inner.step ? this.inner.results() : [[{ ids: [], score: 0 }]];
  }
}

/**
 * The WhisperStrategy of `config` (options/generation.mjs's generationConfig) for one source's forced
 * `prompt` (Python's whisper_strategy): beam search when numBeams > 1, else TokenPicker (greedy), with
 * Whisper's processors, then `processors` (a caller's own); `forced`: the prompt's last ids that the rules see as
 * generated (Python's whisper_strategy(forced=): faster-whisper's prefix). `scored: false`: greedy keeps no score
 * (avgLogprob is NaN), for a caller that reads no avg_logprob (transcribe reports it on every segment).
 */
export function whisperStrategy(prompt, steps, settings, config, timestamps = false,
  { scored = true, processors = [], forced = 0 } = {}) {
  const eosId = settings.eos_token_id;
  const ids = { bosId: prompt[0], eosId, padId: settings.pad_token_id ?? eosId, banned: [] };
  const rules = whisperProcessors(settings, prompt.length - forced, timestamps); // a forced prefix counts as generated
  const options = { scored, prompt, processors: [...rules, ...processors] };
  const Strategy = config.numBeams > 1 ? BeamSearch : TokenPicker;
  return new WhisperStrategy(prompt, settings, new Strategy(1, steps, { ...config, numReturnSequences: 1 }, ids, options));
}
