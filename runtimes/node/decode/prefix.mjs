// CTranslate2's `target_prefix` over the core strategies: the port of tfm_export/runtime/decode/prefix.py.
// Each source's given first target tokens are fed to the decoder before anything is chosen (transformers'
// `generate(decoder_input_ids=[decoder start, ...prefix])`): `PrefixStrategy` feeds the forced prompt one token a
// step, with no choice read, then hands every step to a core strategy (TokenPicker, BeamSearch) whose `prompt` is
// that decoder input (the processors' history). maxNewTokens, minNewTokens, forced EOS and beam search's length
// normalisation count the tokens after the prefix; a forced first token (a multilingual model's target language)
// is put in front of the prefix unless the prefix starts with it. Hypotheses are returned with their prefix.
// The Node strategies take one prompt for all their rows, so sources decode in groups of equal prefixes (Python
// groups by length: the same ids). `return_alternatives` is Python's and the server's only.
// No globals beyond ECMAScript: the browser page may import this file.
import { BeamSearch } from './beam.mjs';
import { TokenPicker } from './strategies.mjs';

/** Feeds `prompt` (the decoder start, then the prefix) one token a step, then lets `inner` choose. */
export class PrefixStrategy {
  constructor(prompt, inner) {
    Object.assign(this, { prompt, inner, rows: inner.rows, reads: inner.reads, bosId: prompt[0], fed: 0 });
    this.finished = inner.steps === 0;
  }

  advance(state) {
    if (this.fed + 1 < this.prompt.length) {
      this.fed += 1;
      return { ids: Array(this.rows).fill(this.prompt[this.fed]), beamIdx: null };
    }
    const out = this.inner.advance(state);
    this.finished = this.inner.finished;
    return out;
  }

  /** The inner strategy's hypotheses, each with the prefix (the prompt after the decoder start) first. */
  results() {
    const head = this.prompt.slice(1);
    return this.inner.results().map((hyps) => hyps.map((h) => ({ ...h, ids: [...head, ...h.ids] })));
  }
}

/** The prefix with the config's forced first token in front (unless it starts with it), and the config without. */
export function withForcedFirst(prefix, config) {
  const forced = config.forcedBosTokenId;
  if (forced === null || forced === undefined) return { prefix: [...prefix], config };
  return { prefix: prefix[0] === forced ? [...prefix] : [forced, ...prefix], config: { ...config, forcedBosTokenId: null } };
}

/** The strategy for `batch` sources that share `prefix`: beam search or token picking after it. */
export function prefixStrategy(batch, prefix, steps, config, ids) {
  const prompt = [ids.bosId, ...prefix];
  const inner = config.numBeams > 1 ? new BeamSearch(batch, steps, config, ids, { prompt })
    : new TokenPicker(batch, steps, config, ids, { prompt });
  return new PrefixStrategy(prompt, inner);
}

/**
 * Each source's group of equal prefixes (after any forced first token): [{ prefix, members (source indices) }],
 * checked: one prefix per source, ids in the vocabulary, room left after it in `limit` positions.
 */
export function prefixGroups(prefixes, sourceCount, config, vocab, limit) {
  if (prefixes.length !== sourceCount) {
    throw new Error(`targetPrefix gives ${prefixes.length} prefixes for ${sourceCount} sources; give one each (an empty list for none)`);
  }
  const groups = new Map();
  prefixes.forEach((given, i) => {
    const { prefix } = withForcedFirst(given, config);
    const bad = prefix.find((id) => !Number.isInteger(id) || id < 0 || id >= vocab);
    if (bad !== undefined) throw new Error(`targetPrefix has id ${bad}, out of range for a vocabulary of ${vocab} ids`);
    if (limit - prefix.length < 1) {
      throw new Error(`a target prefix of ${prefix.length} tokens leaves no room in the model's max_len of ${limit}`);
    }
    const key = prefix.join(',');
    if (!groups.has(key)) groups.set(key, { prefix, members: [] });
    groups.get(key).members.push(i);
  });
  return [...groups.values()];
}
