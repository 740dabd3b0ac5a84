// The one decode driver and the decoder-state protocol every cache implements: the port of
// tfm_export/runtime/decode/loop.py. A `DecoderCache` (states/growing.mjs's GrowingCache,
// states/nocache.mjs's NoCacheCache) encodes a batch into a `DecoderState`; each step the state runs
// the decoder for all its rows, and a strategy (decode/strategies.mjs: Greedy on the graph's own
// argmax, TokenPicker for sampling and processors; decode/beam.mjs's BeamSearch;
// speech/search.mjs's WhisperStrategy) reads what it needs of the step and says which row each next
// row continues; beam search then has the state `reorder` its rows.
//
// The protocols, as Python's (duck-typed here):
//   DecoderCache  start(padded, { rows, reads }) -> Promise<DecoderState>: encode the sources (one per
//                 source, padded) for `rows` decoder rows (source i's rows are i*expand .. i*expand +
//                 expand-1); `reads` ('next_ids' or 'logits') is the one output the state fetches
//   DecoderState  step(tokens) (one id per row), nextIds() (rows), logits() -> { data, vocab },
//                 reorder(beamIdx): row r continues row beamIdx[r]
//   Strategy      rows, reads, bosId (every row's first input, or an array of one per row), finished,
//                 advance(state) -> { ids, beamIdx (null: rows keep their places) }, results()
// No globals beyond ECMAScript (and `performance`, in Node and browsers): the page imports this file.

/** Whether a beam step moved any row (else the caches stay as they are). */
export function moved(beamIdx) {
  return Boolean(beamIdx) && beamIdx.some((row, i) => row !== i);
}

/**
 * Decode `padded` (the encoder's sources) with `strategy`: yields it after each step (its ids grow),
 * and it holds the results when the iterator ends. `timings`, when given, gets `encoderMs` and one
 * `stepsMs` entry per step (Python's DecodeTimings).
 */
export async function* decode(cache, padded, strategy, timings) {
  let start = performance.now();
  const state = await cache.start(padded, strategy);
  if (timings) Object.assign(timings, { encoderMs: performance.now() - start, stepsMs: [] });
  // every row's first input: one id for all, or one per row (decode/together.mjs: each strategy its own)
  let tokens = Array.isArray(strategy.bosId) ? [...strategy.bosId] : Array(strategy.rows).fill(strategy.bosId);
  while (!strategy.finished) {
    start = performance.now();
    await state.step(tokens);
    const { ids, beamIdx } = strategy.advance(state);
    if (!strategy.finished && moved(beamIdx)) state.reorder(beamIdx); // after the last step no past is read again
    timings?.stepsMs.push(performance.now() - start);
    yield strategy;
    tokens = ids;
  }
}

/** `decode` to the end: the strategy's results. */
export async function run(cache, padded, strategy, timings) {
  for await (const step of decode(cache, padded, strategy, timings)) void step;
  return strategy.results();
}
