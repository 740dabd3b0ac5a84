// The parts of a Whisper prompt a caller writes, as token ids, the port of tfm_export/runtime/speech/prompt_text.py:
// an initial prompt (transformers' get_prompt_ids), faster-whisper's hotwords and prefix, each given as text
// (tokenized as " " + the text) or as ids checked against the vocabulary.
import { promptPrefix } from './prompt.mjs';

/** Text as the tokens of " " + the text (Python's text_ids), or token ids checked against the vocabulary. */
export function textIds(model, settings, text, name) {
  if (Array.isArray(text) && text.every(Number.isInteger)) {
    const vocab = model.manifest.config.tgt_vocab_size;
    const bad = text.find((t) => t < 0 || t >= vocab);
    if (bad !== undefined) throw new Error(`${name} id ${bad} is out of range for the model's vocabulary of ${vocab} ids`);
    return text;
  }
  if (typeof text !== 'string') throw new Error(`${name} must be text or an array of token ids, got ${JSON.stringify(text)}`);
  if (!model.tokenizer) throw new Error(`this export has no tokenizer: give the ${name} as token ids`);
  return model.tokenizer.encode(` ${text.trim()}`).filter((t) => t !== settings.eos_token_id);
}

export const blank = (text) => text === undefined || text === null || (typeof text === 'string' && !text.trim()) ||
  (Array.isArray(text) && !text.length);

/**
 * The initial prompt (Python's `prompt_ids`, transformers' get_prompt_ids: <|startofprev|>, then the tokens of
 * " " + the text, or the ids given), the hotwords and the prefix (Python's `hotword_ids`, `prefix_ids`:
 * faster-whisper's, at most max_target_positions / 2 - 1 ids; the prefix after <|0.00|> with timestamps).
 */
export function promptParts(model, settings, { prompt, hotwords, prefix }, stamped) {
  const cut = Math.floor(model.manifest.config.max_len / 2) - 1;
  const hot = blank(hotwords) ? [] : textIds(model, settings, hotwords, 'hotwords').slice(0, cut);
  if (hot.length) promptPrefix(settings, hot); // a model without <|startofprev|> takes no hotwords
  const forced = blank(prefix) ? [] : textIds(model, settings, prefix, 'prefix').slice(0, cut);
  return { promptIds: blank(prompt) ? [] : promptPrefix(settings, textIds(model, settings, prompt, 'prompt')),
    hotwordIds: hot, prefixIds: forced.length && stamped ? [settings.no_timestamps_token_id + 1, ...forced] : forced };
}
