// Who drafts the ids a speculative step checks (decode/speculative.mjs): the port of
// tfm_export/runtime/decode/proposers.py. A proposer sees one row's `history` (its decoder input so far: BOS,
// then every accepted id, the last not yet fed) and returns up to `k` ids it guesses come next; whatever it
// returns, the output is the model's own greedy output.
// - `PromptLookup`: transformers' prompt_lookup_num_tokens (max_matching_ngram_size 2): the longest n-gram
//   (n <= 2) that ends the history, found first in the source (when source ids are target ids: a shared
//   embedding), then earlier in the history; the ids that followed it are the draft, cut before an EOS.
// - `DraftModel`: a smaller export of the same vocabulary (`checkDraft` tells), decoding greedily on its own
//   growing cache (states/growing.mjs: `feed`, `truncate`), rolled back to the ids the model kept. With a
//   `sampler` (speculative sampling, decode/speculative_sampling.mjs) it samples its ids instead, under the
//   model's processors and warpers, and reports the distributions q it drew them from.
// `probabilities`: the last draft's q (k rows of vocab), or null where the draft is deterministic (one-hot q).
// No globals beyond ECMAScript: the browser page may import this file too.

export const MAX_NGRAM = 2; // transformers' max_matching_ngram_size default

/** The ids after the first occurrence of `tail` in `haystack` that leaves some (at most k, cut at EOS); null: none. */
function firstMatch(haystack, tail, k, eosId) {
  const n = tail.length;
  for (let start = 0; start + n < haystack.length; start++) {
    if (tail.every((id, i) => haystack[start + i] === id)) {
      const found = haystack.slice(start + n, start + n + k);
      const eos = found.indexOf(eosId);
      return eos < 0 ? found : found.slice(0, eos);
    }
  }
  return null;
}

/** Drafts from n-grams of the source and of the output so far (Python's PromptLookup). `config`: the manifest's. */
export class PromptLookup {
  constructor(config, maxNgram = MAX_NGRAM) {
    Object.assign(this, { config, maxNgram, source: [], probabilities: null }); // n-gram drafts are certain
  }

  /** A new decode of `source` (one source's ids; `padded`: the encoder's batch of it) begins. */
  async start(source) {
    const c = this.config;
    const row = c.share_embeddings ? [...source] : []; // a features source never shares embeddings (config's check)
    while (row.length && row.at(-1) === c.src_pad_id) row.pop();
    this.source = row;
  }

  async propose(history, k) {
    for (let n = Math.min(this.maxNgram, history.length - 1); n > 0; n--) {
      const tail = history.slice(-n);
      for (const haystack of [this.source, history]) {
        const found = firstMatch(haystack, tail, k, this.config.eos_id);
        if (found !== null) return found;
      }
    }
    return [];
  }

  close() {}
}

/**
 * Drafts by greedy decoding (or sampling) with a draft export of the same vocabulary (Python's DraftModel). `cache`:
 * the draft's growing cache (states/growing.mjs's GrowingCache); `config`: its manifest's config (max_len: its
 * positions); `sampler`: a decode/speculative_sampling.mjs Sampler to sample with (null: greedy).
 */
export class DraftModel {
  constructor(cache, config, sampler = null) {
    Object.assign(this, { cache, config, sampler, state: null, padded: null, fed: [], probabilities: null });
  }

  /** The draft encodes the source at its first proposal: a decode that never drafts never runs its encoder. */
  async start(source, padded) {
    Object.assign(this, { padded, state: null, fed: [] });
  }

  async propose(history, k) {
    let kept = 0; // the draft's cache keeps what the history still agrees with, and at least one id is fed
    while (kept < Math.min(this.fed.length, history.length - 1) && this.fed[kept] === history[kept]) kept += 1;
    k = Math.min(k, this.config.max_len - history.length);
    this.probabilities = null;
    if (k <= 0) return [];
    this.state ??= await this.cache.start(this.padded, { rows: 1, reads: this.sampler ? 'logits' : 'next_ids' });
    this.state.truncate(kept);
    await this.state.feed(history.slice(kept), history.length - kept);
    const q = [];
    const draft = [this.next(history, q)];
    while (draft.length < k && draft.at(-1) !== this.config.eos_id) {
      await this.state.step(draft.slice(-1));
      draft.push(this.next([...history, ...draft], q));
    }
    this.probabilities = q.length ? q : null;
    this.fed = [...history, ...draft.slice(0, -1)];
    return draft;
  }

  /** The draft's id after decoder input `ids` (the last one fed): its argmax, or a sample whose q joins `q`. */
  next(ids, q) {
    if (!this.sampler) return this.state.nextIds()[0];
    const { data, vocab } = this.state.logits();
    const [token, row] = this.sampler.draft(data.subarray(0, vocab), ids);
    q.push(row);
    return token;
  }

  close() {
    this.state = null;
    this.padded = null;
  }
}

/** A value's JSON with its object keys sorted (two tokenizer sections compare equal whatever their key order). */
function canonical(value) {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value && typeof value === 'object') {
    return `{${Object.keys(value).sort().map((key) => `${JSON.stringify(key)}:${canonical(value[key])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const SHARED = ['src_vocab_size', 'tgt_vocab_size', 'bos_id', 'eos_id', 'tgt_pad_id', 'src_pad_id', 'source'];

/**
 * Throws one line unless a draft export speaks the model's vocabulary (Python's check_draft): the same source and
 * target ids, the same special ids and, when both carry one, the same tokenizer. Arguments: the two manifests.
 */
export function checkDraft(manifest, draftManifest) {
  const [c, d] = [manifest.config, draftManifest.config];
  const differ = SHARED.filter((name) => (d[name] ?? null) !== (c[name] ?? null)).map((name) => `${name} ${d[name]} != ${c[name]}`);
  if (!differ.length && manifest.tokenizer && draftManifest.tokenizer
      && canonical(manifest.tokenizer) !== canonical(draftManifest.tokenizer)) differ.push('another tokenizer');
  if (differ.length) {
    throw new Error(`the assistant does not share this model's vocabulary (${differ.join(', ')}): a draft model must use ` +
      'the same tokenizer and ids');
  }
}
