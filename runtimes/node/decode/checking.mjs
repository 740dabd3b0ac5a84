// How a speculative step reads the model's own ids after a draft (decode/speculative.mjs): the port of
// tfm_export/runtime/decode/checking.py's ArgmaxCheck, decode/strategies.mjs's Greedy picking: the argmax
// under the model's suppress_ids at every position the step fed (states/growing.mjs's positionIds), and
// forcedBosTokenId in place of the first step's argmax. The draft is accepted while it equals these picks.
// (Python's ProcessorCheck, greedy under repetition_penalty and other processors, is not ported: Node decodes
// those without speculation, the same ids.)
// No globals beyond ECMAScript: the browser page may import this file too.

/** Greedy's picks (Python's ArgmaxCheck). `config`: the manifest's model config; `forcedBos`: the forced first id. */
export class ArgmaxCheck {
  constructor(config, forcedBos = null) {
    Object.assign(this, { eosId: config.eos_id, forcedBos, banned: config.suppress_ids ?? [] });
  }

  /** The id forced after `step` generated ids without reading the model (null: it reads it). */
  forced(step) {
    return step === 0 ? this.forcedBos : null;
  }

  /** The model's id after history + draft[:i] for every i; `state` was just fed the draft (one row). */
  picks(state, history, draft) {
    return draft.length ? state.positionIds(this.banned)[0] : [state.nextIds()[0]];
  }

  keep() {}
}
