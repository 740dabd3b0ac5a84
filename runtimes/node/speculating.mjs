// Speculative decoding's entry point for api.mjs's generate and generateIds: the port of
// tfm_export/runtime/speculating.py. A call speculates when decode/speculative.mjs's `wanted` says so (an
// `assistant`: an opened draft export of the same vocabulary, or promptLookupNumTokens), its decoding is greedy
// (plain: decode/checking.mjs's ArgmaxCheck; under processors: its ProcessorCheck) or sampled (one beam: the
// model's distribution, seeded as Python's, decode/speculative_sampling.mjs), and its decoder returns
// earlier_logits; it then decodes source by source, each source's greedy ids plain greedy decoding's. The model
// keeps its greedy draft-length policies across calls (`draftLengths`, decode/draft_length.mjs).
// No globals beyond ECMAScript: the browser page may import this file too.
import { isGreedy } from './options/generation.mjs';
import { ArgmaxCheck, ProcessorCheck } from './decode/checking.mjs';
import { Speculation, checkable, proposal, speculate, wanted } from './decode/speculative.mjs';
import { sampleHypotheses } from './decode/speculative_sampling.mjs';
import { padSources } from './sources.mjs';
import { GrowingCache, checksDrafts } from './states/growing.mjs';
import { runtimeGraphs } from './checks.mjs';

const SKIPPED = {
  notGreedy: 'speculative decoding speeds up greedy decoding and sampling only: decoding without it',
  noPositions: "this export's decoder returns only the last position's logits (exported before earlier_logits): " +
    'decoding without speculation (the same ids)',
};

/** Why a decode of `config` on `model` cannot speculate (a SKIPPED key), or null when it can. */
function obstacle(model, config) {
  if (!checkable(config) && !(config.doSample && config.numBeams === 1)) return 'notGreedy';
  if (model.shortlist || runtimeGraphs(model.manifest).decoder !== 'decoder' || !checksDrafts(model.manifest)) return 'noPositions';
  return null;
}

/**
 * Per source its greedy ids, decoded speculatively (decode/speculative.mjs), or null when the call does not ask
 * for speculation or cannot speculate (a warning says why: it then decodes plainly, the same ids). `steps`: the
 * ids' budget; `timings` gets encoderMs, stepsMs (a step per decoder call), drafted and accepted; `stats`, when
 * given, is filled as a Speculation (calls, drafted, accepted). `scored`: per source its hypotheses { ids, score }
 * instead, scored as plain decoding scores them (TokenPicker's sum of log p, checked by decode/checking.mjs's
 * ProcessorCheck: generate's; sampled: numReturnSequences of them). Sampling: per source its first sample's ids
 * (generateIds, as plain sampling), the rows drawing from the generators of plain sampling's rows.
 */
export async function speculativeRows(ort, model, sources, steps, config, assistant, { timings = null, stats = null,
  scored = false } = {}) {
  if (!wanted(config, assistant)) return null;
  if (assistant && typeof assistant.manifest?.config !== 'object') {
    throw new Error('assistant takes an opened export (await openExport(DRAFT_DIR)), not ' +
      `${typeof assistant === 'string' ? 'a folder path' : JSON.stringify(assistant)}`);
  }
  const why = obstacle(model, config);
  if (why) {
    console.warn(`warning: ${SKIPPED[why]}`);
    return null;
  }
  const c = model.manifest.config;
  const cache = new GrowingCache(ort, model);
  const draftCache = assistant && runtimeGraphs(assistant.manifest).decoder === 'decoder' ? new GrowingCache(ort, assistant) : null;
  if (config.doSample) {
    const hyps = await sampleHypotheses(cache, sources, config, model.manifest, assistant, draftCache, steps,
      { timings, stats, samples: scored ? config.numReturnSequences : 1 });
    return scored ? hyps : hyps.map(([best]) => best.ids);
  }
  model.draftLengths ??= new Map();
  const rows = [];
  for (const source of sources) {
    const { proposer, policy } = proposal(config, model.manifest, assistant, draftCache, model.draftLengths);
    const one = new Speculation();
    const check = isGreedy(config) && !scored ? new ArgmaxCheck(c, config.forcedBosTokenId ?? null)
      : new ProcessorCheck(config, steps, c);
    const ids = await speculate(cache, source, padSources(c, [source]), proposer, policy, steps, c, { timings, stats: one, check });
    rows.push(scored ? [{ ids, score: check.score }] : ids);
    if (stats) Object.assign(stats, { calls: stats.calls + one.calls, drafted: stats.drafted + one.drafted, accepted: stats.accepted + one.accepted });
  }
  return rows;
}
