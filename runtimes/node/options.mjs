// Decoding options of the shared loop (decoding.mjs): the Python runtime's GenerationConfig
// (tfm_export/runtime/generation.py) with camelCase names, its defaults, the export's defaults (the
// manifest's `generation` section, snake_case) and the same checks, each one line.

/** camelCase option -> the GenerationConfig field (and manifest `generation` key) it mirrors. */
export const PYTHON_NAMES = {
  maxNewTokens: 'max_new_tokens', // most tokens per row, EOS included (default: fill max_len)
  numBeams: 'num_beams', // 1: greedy or sampling; > 1: beam search
  lengthPenalty: 'length_penalty', // finished beams rank by sum(log p) / length ** lengthPenalty
  earlyStopping: 'early_stopping', // true, false or 'never' (transformers' meaning)
  numReturnSequences: 'num_return_sequences', // hypotheses per source (n-best, or samples)
  doSample: 'do_sample', // sample instead of taking the best token
  temperature: 'temperature',
  topK: 'top_k', // 0: off
  topP: 'top_p', // 1: off
  seed: 'seed', // SplitMix64 seed: the same tokens as Python for the same seed
  minNewTokens: 'min_new_tokens', // EOS is banned until this many tokens were generated
  repetitionPenalty: 'repetition_penalty',
  noRepeatNgramSize: 'no_repeat_ngram_size', // 0: off
  forcedEos: 'forced_eos', // the last allowed token is EOS
  forcedBosTokenId: 'forced_bos_token_id', // the first generated token (a target language, BART's <s>)
  renormalizeLogits: 'renormalize_logits', // log-softmax again after the processors (beam scores)
};

export const DEFAULTS = Object.freeze({
  maxNewTokens: undefined, numBeams: 1, lengthPenalty: 1, earlyStopping: false, numReturnSequences: 1,
  doSample: false, temperature: 1, topK: 0, topP: 1, seed: 0, minNewTokens: 0, repetitionPenalty: 1,
  noRepeatNgramSize: 0, forcedEos: false, forcedBosTokenId: null, renormalizeLogits: false,
});

const isInt = (v) => Number.isInteger(v);
const intAtLeast = (low) => (v) => isInt(v) && v >= low;
const above = (low) => (v) => typeof v === 'number' && v > low;
const isBool = (v) => typeof v === 'boolean';
const isSeed = (v) => (typeof v === 'bigint' ? v >= 0n && v < 1n << 64n : Number.isSafeInteger(v) && v >= 0);

// [option, test of the config, what the option must be]: Python's CHECKS, in its order.
const CHECKS = [
  ['numBeams', (c) => intAtLeast(1)(c.numBeams), 'must be an integer of at least 1'],
  ['lengthPenalty', (c) => Number.isFinite(c.lengthPenalty), 'must be a number'],
  ['earlyStopping', (c) => isBool(c.earlyStopping) || c.earlyStopping === 'never', 'must be true, false or "never"'],
  ['numReturnSequences', (c) => intAtLeast(1)(c.numReturnSequences), 'must be at least 1'],
  ['numReturnSequences', (c) => c.doSample || c.numReturnSequences <= c.numBeams,
    'cannot exceed the number of beams; raise numBeams or return fewer hypotheses'],
  ['doSample', (c) => !(c.doSample && c.numBeams > 1),
    'with numBeams > 1 (beam sampling) is not supported; sample with numBeams 1'],
  ['temperature', (c) => above(0)(c.temperature), 'must be greater than 0'],
  ['topK', (c) => intAtLeast(0)(c.topK), 'must be 0 (off) or more'],
  ['topP', (c) => above(0)(c.topP) && c.topP <= 1, 'must be in (0, 1]'],
  ['seed', (c) => isSeed(c.seed), 'must be an integer in [0, 2**64) (a BigInt beyond 2**53)'],
  ['minNewTokens', (c) => intAtLeast(0)(c.minNewTokens), 'must be 0 or more'],
  ['repetitionPenalty', (c) => above(0)(c.repetitionPenalty), 'must be greater than 0'],
  ['noRepeatNgramSize', (c) => intAtLeast(0)(c.noRepeatNgramSize), 'must be 0 (off) or more'],
  ['forcedEos', (c) => isBool(c.forcedEos), 'must be true or false'],
  ['forcedBosTokenId', (c) => c.forcedBosTokenId === null || intAtLeast(0)(c.forcedBosTokenId),
    'must be a token id (0 or more) or null'],
  ['renormalizeLogits', (c) => isBool(c.renormalizeLogits), 'must be true or false'],
  ['doSample', (c) => isBool(c.doSample), 'must be true or false'],
];

/** Options (camelCase) from a manifest's `generation` section or a Python GenerationConfig dict; unknown keys are ignored. */
export function fromPythonNames(section) {
  const options = {};
  for (const [name, python] of Object.entries(PYTHON_NAMES)) {
    if (section?.[python] !== undefined && section[python] !== null) options[name] = section[python];
  }
  return options;
}

/**
 * The decoding settings of one call: DEFAULTS, then the manifest's `generation` defaults, then
 * `options` (undefined/null values keep the setting). Unknown options and bad values throw one line.
 */
export function generationConfig(manifest, options = {}) {
  for (const name of Object.keys(options)) {
    if (!(name in PYTHON_NAMES)) {
      throw new Error(`unknown decoding option ${JSON.stringify(name)}; known: ${Object.keys(PYTHON_NAMES).join(', ')}`);
    }
  }
  const config = { ...DEFAULTS, ...fromPythonNames(manifest?.generation) };
  for (const [name, value] of Object.entries(options)) if (value !== undefined && value !== null) config[name] = value;
  for (const [name, ok, requirement] of CHECKS) {
    if (!ok(config)) throw new Error(`${name} ${requirement}, got ${String(config[name])}`);
  }
  const vocab = manifest?.config?.tgt_vocab_size;
  if (config.forcedBosTokenId !== null && vocab !== undefined && config.forcedBosTokenId >= vocab) {
    throw new Error(`forcedBosTokenId ${config.forcedBosTokenId} is out of range for a vocabulary of ${vocab} ids`);
  }
  return config;
}

/**
 * Python's GenerationConfig.is_greedy: the decoder's own next_ids suffice (no logits cross to JS).
 * forcedBosTokenId does not count: the greedy loop puts it in place of the first step's ids.
 */
export function isGreedy(config) {
  return config.numBeams === 1 && !config.doSample && config.minNewTokens === 0 && config.repetitionPenalty === 1
    && config.noRepeatNgramSize === 0 && !config.forcedEos && config.numReturnSequences === 1;
}
