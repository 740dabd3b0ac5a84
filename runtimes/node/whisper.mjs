// Whisper's decoding rules in JS, ported from tfm_export/runtime/whisper.py and whisper_search.py
// (their docstrings are the specification; transformers' WhisperForConditionalGeneration.generate is
// theirs): the settings (the manifest's `speech`: generation_config.json's Whisper keys), the forced
// decoder prompt (<|startoftranscript|>, language, task, <|notimestamps|>), the language detection
// at <|startoftranscript|>, the logits processors (begin_suppress_tokens, suppress_tokens) and the
// strategy that drives them through decoding.mjs's step driver with search.mjs's greedy picker or
// beam search, and the timestamp rules (WhisperTimeStampLogitsProcessor) when timestamps are asked.
// No globals beyond ECMAScript: a page can import it.
import { BeamSearch, TokenPicker, argmax, logSoftmax, pairwiseSum, scratch } from './search.mjs';

export const DETECT = -1; // a prompt's language slot that the step on <|startoftranscript|> fills
const TASKS = ['translate', 'transcribe']; // transformers' TASK_IDS

// transformers' tokenization_whisper.LANGUAGES (code -> name) and its aliases (TO_LANGUAGE_CODE).
const CODES = ('en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt ' +
  'la mi ml cy sk te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg ' +
  'sd gu am yi lo uz fo ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue').split(' ');
const NAMES = ('english,chinese,german,spanish,russian,korean,french,japanese,portuguese,turkish,polish,catalan,' +
  'dutch,arabic,swedish,italian,indonesian,hindi,finnish,vietnamese,hebrew,ukrainian,greek,malay,czech,romanian,' +
  'danish,hungarian,tamil,norwegian,thai,urdu,croatian,bulgarian,lithuanian,latin,maori,malayalam,welsh,slovak,' +
  'telugu,persian,latvian,bengali,serbian,azerbaijani,slovenian,kannada,estonian,macedonian,breton,basque,icelandic,' +
  'armenian,nepali,mongolian,bosnian,kazakh,albanian,swahili,galician,marathi,punjabi,sinhala,khmer,shona,yoruba,' +
  'somali,afrikaans,occitan,georgian,belarusian,tajik,sindhi,gujarati,amharic,yiddish,lao,uzbek,faroese,' +
  'haitian creole,pashto,turkmen,nynorsk,maltese,sanskrit,luxembourgish,myanmar,tibetan,tagalog,malagasy,assamese,' +
  'tatar,hawaiian,lingala,hausa,bashkir,javanese,sundanese,cantonese').split(',');
const TO_LANGUAGE_CODE = {
  ...Object.fromEntries(NAMES.map((name, i) => [name, CODES[i]])),
  burmese: 'my', valencian: 'ca', flemish: 'nl', haitian: 'ht', letzeburgesch: 'lb', pushto: 'ps', panjabi: 'pa',
  moldavian: 'ro', moldovan: 'ro', sinhalese: 'si', castilian: 'es', mandarin: 'zh',
};

/** The export's Whisper decoding settings (the manifest's `speech`), or one line saying why there are none. */
export function whisperSettings(manifest) {
  const speech = manifest?.speech;
  if (!manifest?.features) {
    throw new Error('this export is not a speech model (its encoder reads token ids); transcribe needs a Whisper ' +
      'export: use generate or translate for text');
  }
  if (!speech) {
    throw new Error('this export has no Whisper decoding settings (the manifest\'s speech, kept by exports from ' +
      'tfm-export 0.1 on); export the Whisper folder again to transcribe with it');
  }
  for (const key of ['decoder_start_token_id', 'eos_token_id']) {
    if (!Number.isInteger(speech[key])) throw new Error(`manifest.json speech has no ${key}; re-export the Whisper folder`);
  }
  return { suppress_tokens: [], begin_suppress_tokens: [], ...speech };
}

/** The model's language codes ("de", "en", ...) in id order; [] for an English-only model. */
export function whisperLanguages(settings) {
  const map = settings.lang_to_id ?? {};
  return Object.keys(map).sort((a, b) => map[a] - map[b]).map((token) => token.replace(/^<\|(.*)\|>$/, '$1'));
}

/**
 * What Python's `tfm-export languages` lists for a Whisper export: { spoken: the codes `language` takes ([] for an
 * English-only model), translateInto: 'en' when the model translates speech into English, else null }.
 */
export function speechLanguages(settings) {
  const spoken = whisperLanguages(settings);
  return { spoken, translateInto: spoken.length && 'translate' in (settings.task_to_id ?? {}) ? 'en' : null };
}

/** The token id of `language`: a code ("de"), an English name or alias ("german"), or the token ("<|de|>"). */
export function languageId(settings, language) {
  const map = settings.lang_to_id ?? {};
  const text = String(language).toLowerCase();
  const token = text in map ? text : text in TO_LANGUAGE_CODE ? `<|${TO_LANGUAGE_CODE[text]}|>`
    : CODES.includes(text) ? `<|${text}|>` : null;
  if (token === null || !(token in map)) {
    throw new Error(`language ${JSON.stringify(language)} is not a language of this Whisper model; its languages are ` +
      `${whisperLanguages(settings).join(', ') || 'none'} (a code "de", an English name "german" or a token "<|de|>")`);
  }
  return map[token];
}

/** The deprecated forced_decoder_ids after <|startoftranscript|> (positions 1, 2, ... in order). */
function forcedTokens(settings) {
  const pairs = [...(settings.forced_decoder_ids ?? [])];
  const out = [];
  if (pairs.length && pairs[0][0] === 1) {
    while (pairs.length && pairs[0][0] === out.length + 1) out.push(pairs.shift()[1]);
    if (pairs.length) throw new Error('forced_decoder_ids do not follow Whisper\'s prompt pattern (positions 1, 2, ...)');
  }
  return out;
}

/** Whether the prompt's language comes from detection (none given, the model has languages). */
export function needsDetection(settings, language, task) {
  if ((language !== undefined && language !== null) || !Object.keys(settings.lang_to_id ?? {}).length) return false;
  const forced = task === undefined || task === null ? forcedTokens(settings) : [];
  return forced.length === 0 || forced[0] === null;
}

/**
 * <|startoftranscript|>, language, task, <|notimestamps|> (unless `timestamps`) as transformers'
 * `_retrieve_init_tokens` (Python's init_tokens); a language to be detected is `DETECT`.
 */
export function initTokens(settings, language, task, timestamps = false) {
  const given = (v) => v !== undefined && v !== null;
  if (settings.is_multilingual === false && (given(language) || given(task))) {
    throw new Error('this Whisper model is English-only: it takes no language or task');
  }
  let tokens = [settings.decoder_start_token_id, ...(!given(language) && !given(task) ? forcedTokens(settings) : [])];
  let lang = given(language) ? languageId(settings, language) : null;
  if (lang === null && needsDetection(settings, language, task)) lang = DETECT;
  if (lang !== null) tokens.splice(1, 1, lang);
  const taskIds = Object.values(settings.task_to_id ?? {});
  if (given(task)) {
    if (!TASKS.includes(task) || !(task in (settings.task_to_id ?? {}))) {
      throw new Error(`task must be one of ${TASKS.join(', ')}, got ${JSON.stringify(task)}`);
    }
    const taskId = settings.task_to_id[task];
    tokens = [...tokens, taskId].map((t) => (taskIds.includes(t) ? taskId : t));
  } else if (given(language) && settings.task_to_id && !tokens.some((t) => taskIds.includes(t))) {
    tokens.push(settings.task_to_id.transcribe);
  }
  const nts = settings.no_timestamps_token_id;
  if (!timestamps && given(nts) && tokens.at(-1) !== nts) tokens.push(nts);
  else if (timestamps && tokens.at(-1) === nts) tokens.pop();
  return tokens.filter(given);
}

/**
 * An initial prompt's ids as transformers' tokenizer `get_prompt_ids` gives them (Python's prompt_prefix):
 * <|startofprev|> first. They go before the init tokens of every window.
 */
export function promptPrefix(settings, ids) {
  const prev = settings.prev_sot_token_id;
  if (prev === undefined || prev === null) {
    throw new Error('this Whisper model has no <|startofprev|> (prev_sot_token_id): it takes no prompt');
  }
  return ids[0] === prev ? [...ids] : [prev, ...ids];
}

/**
 * How many tokens a window may generate after a `promptLength` prompt (Python's max_new_tokens,
 * transformers' `_set_max_new_tokens_and_length`).
 */
export function maxNewTokens(settings, promptLength, requested, maxTargetPositions) {
  if (requested !== undefined && requested !== null) {
    if (!Number.isInteger(requested) || requested < 1) throw new Error(`maxNewTokens must be an integer of at least 1, got ${requested}`);
    if (requested + promptLength > maxTargetPositions) {
      throw new Error(`a ${promptLength}-token decoder prompt and maxNewTokens ${requested} exceed Whisper's ` +
        `${maxTargetPositions} positions; ask for fewer tokens`);
    }
    return requested;
  }
  const limit = settings.max_length ?? maxTargetPositions;
  const total = Math.min(limit + Math.min(Math.floor(maxTargetPositions / 2) - 1, promptLength), maxTargetPositions);
  return Math.max(total - promptLength, 0);
}

/** The language code of a prompt's language token ("de"), or null. */
export function languageCode(settings, tokenId) {
  const found = Object.entries(settings.lang_to_id ?? {}).find(([, id]) => id === tokenId);
  return found ? found[0].replace(/^<\|(.*)\|>$/, '$1') : null;
}

/** The largest of x[from, to), -Infinity for none. */
function maxOf(x, from, to) {
  let top = -Infinity;
  for (let t = from; t < to; t++) if (x[t] > top) top = x[t];
  return top;
}

/** log(sum(exp(x))) of x[from, to), -Infinity when all are -Infinity (Python's _logsumexp, numpy's sum). */
function logSumExp(x, from, to) {
  const top = maxOf(x, from, to);
  if (top === -Infinity) return -Infinity;
  const exp = scratch(to - from);
  for (let t = from; t < to; t++) exp[t - from] = Math.exp(x[t] - top);
  return top + Math.log(pairwiseSum(exp, 0, to - from));
}

/**
 * Whether the timestamps' summed probability beats every text token's (Python's from_logprob test, step
 * by step): log_softmax of the row in scratch row 1, its sums in row 0, so no step allocates.
 */
function timestampsWin(scores, begin) {
  const n = scores.length;
  const top = maxOf(scores, 0, n);
  if (top === -Infinity) return false; // numpy: a row of -inf gives nan, and nan > x is false
  const exp = scratch(n);
  for (let t = 0; t < n; t++) exp[t] = Math.exp(scores[t] - top);
  const lse = Math.log(pairwiseSum(exp, 0, n));
  const logp = scratch(n, 1).subarray(0, n);
  for (let t = 0; t < n; t++) logp[t] = (scores[t] - top) - lse;
  return logSumExp(logp, begin, n) > maxOf(logp, 0, begin);
}

/**
 * WhisperTimeStampLogitsProcessor on one row (Python's timestamp_rules), in place: <|notimestamps|>
 * banned; after a lone timestamp only timestamps or the ids from EOS on, after a pair no timestamp;
 * timestamps never decrease; the first generated token is a timestamp at most
 * max_initial_timestamp_index; and when the timestamps' summed probability beats every text token's,
 * only timestamps. `history`: the row's decoder input (prompt, then generated ids).
 */
export function timestampRules(scores, history, beginIndex, settings) {
  const nts = settings.no_timestamps_token_id;
  const begin = nts + 1;
  const ban = (from, to) => { for (let t = Math.max(from, 0); t < Math.min(to, scores.length); t++) scores[t] = -Infinity; };
  scores[nts] = -Infinity;
  const row = history.slice(beginIndex);
  const last = row.length >= 1 && row.at(-1) >= begin;
  const penultimate = row.length < 2 || row.at(-2) >= begin;
  if (last) ban(...(penultimate ? [begin, scores.length] : [0, settings.eos_token_id]));
  const stamps = row.filter((t) => t >= begin);
  const floor = !stamps.length ? begin : last && !penultimate ? stamps.at(-1) : stamps.at(-1) + 1;
  ban(begin, floor);
  if (history.length === beginIndex) {
    ban(0, begin);
    const most = settings.max_initial_timestamp_index;
    if (most !== undefined && most !== null) ban(begin + most + 1, scores.length);
  }
  if (timestampsWin(scores, begin)) ban(0, begin);
  return scores;
}

/**
 * Whisper's processors on one row, in place, after the generic ones (transformers' order):
 * begin_suppress_tokens at the first generated position, suppress_tokens, then the timestamp rules
 * when `timestamps`.
 */
export function whisperProcessRow(scores, history, beginIndex, settings, timestamps = false) {
  const ban = (tokens) => { for (const t of tokens) if (t >= 0 && t < scores.length) scores[t] = -Infinity; };
  if (history.length === beginIndex) ban(settings.begin_suppress_tokens);
  ban(settings.suppress_tokens);
  return timestamps ? timestampRules(scores, history, beginIndex, settings) : scores;
}

/** The language id with the highest logit among lang_to_id's tokens (ties: the lower id), as detect_language. */
export function detectLanguage(logits, settings) {
  const ids = Object.values(settings.lang_to_id ?? {}).sort((a, b) => a - b);
  if (!ids.length) throw new Error('this Whisper model is English-only: there is no language to detect');
  return ids[argmax(ids.map((id) => logits[id]))];
}

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
 * One source's Whisper decoding through decoding.mjs's driver (Python's WhisperPicker and
 * WhisperBeamSearch): every row first feeds the forced `prompt`, one token per step; at the step
 * that fed <|startoftranscript|> a `DETECT` slot gets the detected language; from the first
 * generated position on, search.mjs's TokenPicker (greedy) or BeamSearch chooses, with the prompt
 * as the rows' history and Whisper's processors after the generic ones. `config`: decoding options
 * (options.mjs's generationConfig), numBeams > 1 for beam search. `scored: false`: greedy keeps no
 * score (avgLogprob is NaN), for a caller that reads no avg_logprob (transcribe reports it on every segment).
 */
export class WhisperStrategy {
  constructor(prompt, steps, settings, config, timestamps = false, { scored = true } = {}) {
    Object.assign(this, { prompt: [...prompt], steps, settings, config, timestamps, scored, inner: null, fed: 0 });
    this.rows = config.numBeams > 1 ? config.numBeams : 1;
    this.reads = 'logits';
    this.bosId = prompt[0];
    this.sotPos = prompt.indexOf(settings.decoder_start_token_id);
    this.finished = steps === 0;
  }

  /** The prompt's next token for every row, or the inner strategy's choice once the prompt is fed. */
  advance(state) {
    if (this.inner) {
      const out = this.inner.advance(state);
      this.finished = this.inner.finished;
      return out;
    }
    if (this.fed === this.sotPos) this.atStart(state);
    this.fed += 1;
    if (this.fed < this.prompt.length) return { ids: Array(this.rows).fill(this.prompt[this.fed]), beamIdx: null };
    this.inner = this.chooser(); // this step's logits are the first generated token's
    return this.advance(state);
  }

  /**
   * The step that fed <|startoftranscript|> (every row fed the same prompt: row 0 speaks for all): the
   * language when it is to be detected, and P(<|nospeech|>) (WhisperNoSpeechDetection: softmax of the
   * raw logits), which the long-form loop's silence test reads.
   */
  atStart(state) {
    const { data, vocab } = state.logits();
    const nts = this.settings.no_timestamps_token_id;
    if (nts !== undefined && nts !== null) this.noSpeechProb = Math.exp(logSoftmax(data, 0, vocab)[nts - 1]);
    if (!this.prompt.includes(DETECT)) return;
    const found = detectLanguage(data.subarray(0, vocab), this.settings);
    this.prompt = this.prompt.map((t) => (t === DETECT ? found : t));
  }

  /** The best hypothesis' generated ids as decoded: EOS last when it ended with one. */
  decoded() {
    const { inner } = this;
    if (!inner) return [];
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
    return this.scored ? this.inner.scores[0] / n : NaN;
  }

  /** The window's best row as longform.mjs reads it (Python's WhisperRow): ids without EOS, whether it ended
   * with EOS, avgLogprob (NaN: none) and noSpeechProb (null for a model without <|nospeech|>). */
  windowRow() {
    const decoded = this.decoded();
    const ended = decoded.length > 0 && decoded.at(-1) === this.settings.eos_token_id;
    return { ids: ended ? decoded.slice(0, -1) : [...decoded], ended, avgLogprob: this.avgLogprob(),
      noSpeechProb: this.noSpeechProb ?? null };
  }

  /** search.mjs's strategy for the generated tokens, with the prompt as history and Whisper's processors. */
  chooser() {
    const { settings, prompt } = this;
    const ids = {
      bosId: prompt[0], eosId: settings.eos_token_id, padId: settings.pad_token_id ?? settings.eos_token_id,
      banned: [], prompt,
      process: (scores, history) => whisperProcessRow(scores, history, prompt.length, settings, this.timestamps),
    };
    const Strategy = this.config.numBeams > 1 ? BeamSearch : TokenPicker;
    return new Strategy(1, this.steps, { ...this.config, numReturnSequences: 1 }, ids, { scored: this.scored });
  }

  /** [[{ ids (generated, without EOS), score }]]: the best hypothesis of the one source. */
  results() {
    return this.inner ? this.inner.results() : [[{ ids: [], score: 0 }]];
  }
}
