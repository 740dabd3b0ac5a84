// Exact speculative greedy decoding: a proposer (decode/proposers.mjs) drafts k ids, the model checks them in one
// step. The port of tfm_export/runtime/decode/speculative.py: each step feeds the row's last id and the draft
// d_1..d_k (states/growing.mjs's `feed`), reads the model's greedy id g_0..g_k after each (a check,
// decode/checking.mjs), accepts the draft while d_{i+1} == g_i, emits the accepted ids and g_n, and cuts the
// cache back to the ids kept (`truncate`). transformers' rule for greedy assisted generation and
// prompt_lookup_num_tokens: plain greedy decoding's ids, id for id, in fewer decoder calls. The draft length
// adapts (decode/draft_length.mjs). Only one source at a time speculates (speculating.mjs loops over them).
// A `prompt` (Whisper's forced decoder input, speech/assisted.mjs) is fed whole in the first step. Sampling's check
// is decode/speculative_sampling.mjs's SamplingCheck: its picks are the ids its rule emits.
// No globals beyond ECMAScript (and `performance`): the browser page may import this file too.
import { ArgmaxCheck } from './checking.mjs';
import { DraftLength } from './draft_length.mjs';
import { DraftModel, PromptLookup, checkDraft } from './proposers.mjs';

export const MAX_POLICIES = 16; // a model's draft-length policies kept across calls (`proposal`)
export const CHECKED = ['next_ids', 'logits', 'earlier_logits']; // what a checking state fetches each step

/** What a speculative decode did (Python's Speculation): decoder calls, ids drafted and drafted ids accepted. */
export class Speculation {
  constructor() { Object.assign(this, { calls: 0, drafted: 0, accepted: 0, ended: false }); }

  get acceptance() { return this.drafted ? this.accepted / this.drafted : 0; }
}

/**
 * Greedy ids of one source (at most `steps` with EOS; EOS not returned), drafted by `proposer`, with `policy`'s
 * draft lengths: decode/strategies.mjs's Greedy ids. `cache`: a GrowingCache whose decoder returns
 * earlier_logits; `source`: the source's ids; `padded`: the encoder's batch of it; `c`: the model config.
 * `stats` (a Speculation) and `timings` ({ encoderMs, stepsMs, drafted, accepted }) are filled when given; `prompt`:
 * the decoder's forced input (default: BOS), fed in the first step.
 */
export async function speculate(cache, source, padded, proposer, policy, steps, c, { forcedBos = null, timings = null,
  stats = new Speculation(), check = new ArgmaxCheck(c, forcedBos), prompt = null } = {}) {
  const eos = check.eosId;
  let start = performance.now();
  const state = await cache.start(padded, { rows: 1, reads: CHECKED });
  await proposer.start(source, padded);
  if (timings) Object.assign(timings, { encoderMs: performance.now() - start, stepsMs: timings.stepsMs ?? [] });
  const history = [...(prompt ?? [c.bos_id])]; // the decoder's input; from state.length on not fed
  const out = [];
  try {
    while (out.length < steps && (!out.length || out.at(-1) !== eos)) {
      start = performance.now();
      const forced = check.forced(out.length);
      // a forced id is known without the model: it joins the history unfed and rides with this call's draft
      const lead = forced === null ? [] : [forced];
      out.push(...lead);
      history.push(...lead);
      if (out.length >= steps || out.at(-1) === eos) break; // a budget of one id, or a forced EOS
      const k = policy.length(steps - out.length - 1);
      const draft = k > 0 ? await proposer.propose(history, k) : [];
      const fed = [...history.slice(state.length), ...draft];
      await state.feed(fed, fed.length);
      const picked = check.picks(state, history, draft, out.length);
      let n = 0;
      while (n < Math.min(draft.length, picked.length) && draft[n] === picked[n]) n += 1;
      let fresh = [...draft.slice(0, n), ...picked.slice(n, n + 1)];
      if (fresh.includes(eos)) fresh = fresh.slice(0, fresh.indexOf(eos) + 1);
      check.keep(fresh.length);
      out.push(...fresh);
      history.push(...fresh);
      state.truncate(history.length - 1);
      const ms = performance.now() - start;
      policy.record(draft.length, n, lead.length + fresh.length, ms);
      Object.assign(stats, { calls: stats.calls + 1, drafted: stats.drafted + draft.length, accepted: stats.accepted + n });
      timings?.stepsMs.push(ms);
    }
  } finally {
    proposer.close();
  }
  if (timings) Object.assign(timings, { drafted: (timings.drafted ?? 0) + stats.drafted, accepted: (timings.accepted ?? 0) + stats.accepted });
  stats.ended = out.length > 0 && out.at(-1) === eos;
  return stats.ended ? out.slice(0, -1) : out;
}

/** Whether a decode of `config` (options/generation.mjs) with `assistant` asks for speculation. */
export function wanted(config, assistant) {
  return config.promptLookupNumTokens > 0 || (assistant !== null && assistant !== undefined);
}

/**
 * Whether a decode of `config` picks greedily, so that a check reproduces it (numBeams 1, no sampling, one
 * sequence); its processors, if any, are decode/checking.mjs's ProcessorCheck's.
 */
export function checkable(config) {
  return config.numBeams === 1 && !config.doSample && config.numReturnSequences === 1;
}

/**
 * The proposer and draft-length policy of a decode (Python's `proposal`): the `assistant`'s drafts (an opened
 * export of the same vocabulary, checked: checkDraft; `draftCache`: its GrowingCache) from config.numAssistantTokens,
 * else prompt lookup of config.promptLookupNumTokens. `policies` (a Map, the model's, kept across its calls) holds
 * the policy of each proposer already used, which then goes on from where it was.
 */
export function proposal(config, manifest, assistant, draftCache, policies = null) {
  let proposer, key, fresh;
  if (!assistant) {
    const n = config.promptLookupNumTokens;
    proposer = new PromptLookup(manifest.config);
    [key, fresh] = [`lookup:${n}`, () => new DraftLength(n, n)];
  } else {
    checkDraft(manifest, assistant.manifest);
    if (!draftCache) throw new Error('the assistant has no KV-cache decoder (a module export): it cannot draft');
    const n = config.numAssistantTokens;
    proposer = new DraftModel(draftCache, assistant.manifest.config);
    if (!draftIds.has(assistant)) draftIds.set(assistant, drafts++);
    [key, fresh] = [`draft:${draftIds.get(assistant)}:${n}`, () => new DraftLength(n)];
  }
  if (!policies) return { proposer, policy: fresh() };
  if (!policies.has(key) && policies.size >= MAX_POLICIES) policies.delete(policies.keys().next().value);
  if (!policies.has(key)) policies.set(key, fresh());
  return { proposer, policy: policies.get(key) };
}
const draftIds = new WeakMap(); // an assistant's number in the policies' keys (Python's id(assistant.growing))
let drafts = 0;
