// How many ids a speculative step drafts, and whether it drafts at all (decode/speculative.mjs): the port of
// tfm_export/runtime/decode/draft_length.py. The length follows transformers' "heuristic" schedule (+2 after a
// step that accepted every drafted id, -1, at least 1, otherwise; at most `cap`), and the switch-off times the
// steps online (milliseconds per emitted id over the last WINDOW steps of each kind): once TRIAL speculative
// steps are timed, speculation that costs more per id than plain steps pauses for `pause` plain steps, then
// tries again (a retry that does not pay doubles the pause, at most MAX_PAUSE, and halves the length). The first
// PLAIN_FIRST steps are plain, then every other one until WINDOW plain steps are timed, then one after every
// REFRESH speculative ones. The ids never depend on it: every step emits the model's own greedy ids.
// No globals beyond ECMAScript: the browser page may import this file too.

export const TRIAL = 2; // speculative steps timed before they are judged
export const FIRST_PAUSE = 8; // plain steps after the first switch-off
export const MAX_PAUSE = 512;
export const WINDOW = 16; // the steps of each kind that the cost per id is taken over
export const SPIKE = 3.0; // a step's time counts at most SPIKE x the window's median (a step that lost the CPU)
export const PLAIN_FIRST = 3; // plain steps timed before the first draft
export const REFRESH = 32; // while speculating, one plain step in REFRESH + 1 keeps the plain figure current

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** The last WINDOW steps of one kind, [ms, ids emitted] (Python's Recent). */
export class Recent {
  constructor() { this.steps = []; }

  add(ms, ids) {
    this.steps.push([ms, ids]);
    if (this.steps.length > WINDOW) this.steps.shift();
  }

  get count() { return this.steps.length; }

  /** The median step's time per id (plain steps: one id each). */
  get median() { return this.steps.length ? median(this.steps.map(([s, i]) => s / i)) : Infinity; }

  /** Their time over their ids, each step's time clipped at SPIKE x their median. */
  get perId() {
    const ids = this.steps.reduce((sum, [, i]) => sum + i, 0);
    if (!ids) return Infinity;
    const bound = SPIKE * median(this.steps.map(([s]) => s));
    return this.steps.reduce((sum, [s]) => sum + Math.min(s, bound), 0) / ids;
  }
}

/** The draft length `k` (from `start`, at most `cap`) and the switch-off; `switchOff: false` keeps the schedule alone. */
export class DraftLength {
  constructor(start, cap = null, { switchOff = true } = {}) {
    Object.assign(this, { start, cap, switchOff, k: start, off: 0, pause: FIRST_PAUSE, pauses: 0, sincePlain: 0 });
    this.plain = new Recent();
    this.speculative = new Recent();
  }

  /** Whether the next step drafts (Python's `drafting`). */
  get drafting() {
    const every = this.plain.count >= WINDOW ? REFRESH : 1;
    return !this.switchOff || (this.off === 0 && this.plain.count >= PLAIN_FIRST && this.sincePlain < every);
  }

  /** How many ids to draft now, at most `room`; 0: a plain step. */
  length(room) {
    return this.drafting ? Math.max(0, Math.min(this.k, room)) : 0;
  }

  /** A step drafted `drafted` ids, accepted `accepted`, emitted `emitted` and took `ms`, drafting included. */
  record(drafted, accepted, emitted, ms) {
    if (drafted === 0) {
      this.plain.add(ms, emitted);
      this.sincePlain = 0;
      if (this.off) this.off -= 1;
      return;
    }
    this.sincePlain += 1;
    const grown = accepted === drafted ? this.k + 2 : Math.max(1, this.k - 1);
    this.k = this.cap === null ? grown : Math.min(grown, this.cap);
    if (this.switchOff) {
      this.speculative.add(ms, emitted);
      this.judge();
    }
  }

  /** After TRIAL speculative steps, switch off when they cost more per id than the median plain step. */
  judge() {
    if (this.speculative.count < TRIAL) return;
    if (this.speculative.perId <= this.plain.median) {
      this.pause = FIRST_PAUSE;
      return;
    }
    this.off = this.pause;
    this.pauses += 1;
    this.pause = Math.min(2 * this.pause, MAX_PAUSE);
    this.k = Math.max(1, Math.floor(this.k / 2));
    this.speculative = new Recent();
  }
}
