// Several strategies side by side over one decoder state, as one strategy of decode/loop.mjs: the port of
// tfm_export/runtime/decode/together.py (issue #60). `Together(strategies)` gives strategy i the rows
// i*w .. i*w + w-1 of each step (w: every strategy's rows): it reads its rows of the step (a `Rows` view of the
// state), forces its own prompt, ends on its own, and its beams move within its rows. The state's outputs are
// read once however many strategies read them (`Step`). A strategy that ended idles on its last ids until all
// have. So the windows of several transcriptions decode in one state of batch n through the one loop
// (speech/batch_rounds.mjs), each window's ids those of the window decoded alone.
// No globals beyond ECMAScript: a page can import it.

/** A Strategy of strategies.length * w rows: each strategy's rows in order (see the module comment). */
export class Together {
  constructor(strategies) {
    const widths = [...new Set(strategies.map((s) => s.rows))].sort((a, b) => a - b);
    if (widths.length !== 1) {
      throw new Error(`Together: strategies of one width (rows per source) only, not ${JSON.stringify(widths)}`);
    }
    const reads = [...new Set(strategies.map((s) => s.reads))];
    if (reads.length !== 1) { // a state fetches one output (decode/loop.mjs): every strategy must read it
      throw new Error(`Together: strategies that read one output only, not ${JSON.stringify(reads.sort())}`);
    }
    Object.assign(this, { strategies: [...strategies], width: widths[0], reads: reads[0] });
    this.rows = this.width * this.strategies.length;
    // every row's first input, each strategy its own (decode/loop.mjs fills the rows with it)
    this.bosId = this.strategies.flatMap((s) => Array(this.width).fill(s.bosId));
    this.tokens = [...this.bosId]; // an ended strategy's rows keep their last ids
  }

  get finished() {
    return this.strategies.every((s) => s.finished);
  }

  advance(state) {
    const step = new Step(state);
    const { width } = this;
    let order = null;
    this.strategies.forEach((strategy, i) => {
      if (strategy.finished) return;
      const start = i * width;
      const { ids, beamIdx } = strategy.advance(new Rows(step, start, start + width));
      for (let r = 0; r < width; r++) this.tokens[start + r] = ids[r];
      if (!strategy.finished && beamIdx && beamIdx.some((row, r) => row !== r)) {
        order ??= Array.from({ length: this.rows }, (_, r) => r);
        for (let r = 0; r < width; r++) order[start + r] = beamIdx[r] + start;
      }
    });
    return { ids: [...this.tokens], beamIdx: order };
  }

  results() {
    return this.strategies.map((s) => s.results());
  }
}

/** One decoder step of the state, read once however many strategies read it. */
class Step {
  constructor(state) { this.state = state; this.ids = null; this.scores = null; }

  nextIds() { return (this.ids ??= this.state.nextIds()); }

  logits() { return (this.scores ??= this.state.logits()); }
}

/** A DecoderState view of one strategy's rows [start, end) of a step (it only reads: the state steps and reorders). */
class Rows {
  constructor(step, start, end) { Object.assign(this, { step, start, end, rows: end - start }); }

  nextIds() { return this.step.nextIds().slice(this.start, this.end); }

  logits() {
    const { data, vocab } = this.step.logits();
    return { data: data.subarray(this.start * vocab, this.end * vocab), vocab };
  }
}
