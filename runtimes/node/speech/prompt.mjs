// Whisper's settings and forced decoder prompt: the port of tfm_export/runtime/speech/prompt.py (its
// docstrings are the specification; transformers' WhisperForConditionalGeneration.generate is theirs):
// the settings (the manifest's `speech`: generation_config.json's Whisper keys), the language codes, the
// init tokens (<|startoftranscript|>, language, task, <|notimestamps|>; a language to be detected is
// `DETECT`), an initial prompt's ids, and a window's budget of new tokens.
// No globals beyond ECMAScript: a page can import it.

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
  return new WhisperSettings(speech);
}

/**
 * Whisper's decoding settings (Python's WhisperSettings): the manifest's `speech` keys as they are
 * (generation_config.json's snake_case names), suppress_tokens and begin_suppress_tokens defaulting to none.
 * Made by `whisperSettings`, which checks the keys every decode needs.
 */
export class WhisperSettings {
  constructor(speech) {
    Object.assign(this, { suppress_tokens: [], begin_suppress_tokens: [], ...speech });
  }
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
