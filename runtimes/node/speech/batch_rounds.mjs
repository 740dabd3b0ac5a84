// Windows of several transcriptions decoded together, in rounds: the port of
// tfm_export/runtime/speech/batch_rounds.py (issue #60). A transcription runs window by window
// (speech/longform.mjs), each window's prompt depending on the windows before it, so the windows of several
// recordings (the VAD chunks of one, or several files) cannot be known up front. Each transcription is therefore
// a job, an async function run with `WindowRounds.runWindow` as its window runner: a job hands its window and
// strategy over and awaits the promise. Once every live job waits (JS is single-threaded: a job that is not
// waiting is computing, or awaiting something else, such as the alignment graph, and the round waits for it
// to hand its window over or end), the round's windows are decoded together: their encoder in one batch
// (batch, n_mels, frames), then every window's strategy over its own rows of one decoder state
// (`decodeTogether`, decode/together.mjs), the rows of the windows that end idling until the longest is done.
// So a round of n windows costs one encoder call and the decoder steps of its longest window, each of batch n;
// and a window's tokens are those of the window decoded alone.
//
// `runJobs` runs the jobs `workers` at a time, their answers in order; the first error stops the rest (at their
// next job) and is thrown. No globals beyond ECMAScript: a page can import it.
import { run } from '../decode/loop.mjs';
import { Together } from '../decode/together.mjs';

/**
 * Decode each window with its strategy (one source each, all of the same rows per source), in one decoder state
 * through the one loop (decode/together.mjs): its rows i*rows .. i*rows + rows-1 are window i's. The strategies
 * hold the results.
 */
export function decodeTogether(cache, windows, strategies) {
  return run(cache, windows, new Together(strategies));
}

/**
 * The window runner shared by `workers` jobs at a time (the module comment): a round is decoded once every live
 * worker waits; `leave()` when a worker has no more work. `rounds`: the rounds decoded so far.
 */
export class WindowRounds {
  constructor(cache, workers) {
    Object.assign(this, { cache, live: workers, waiting: [], rounds: 0 });
    this.runWindow = this.runWindow.bind(this); // handed to the jobs as a plain function, as cacheRunner's
  }

  /** A promise of the strategy's results once its round is decoded. */
  runWindow(window, strategy) {
    if (strategy.finished) return Promise.resolve(strategy.results());
    return new Promise((resolve, reject) => {
      this.waiting.push({ window, strategy, resolve, reject });
      this.flush();
    });
  }

  leave() {
    this.live -= 1;
    this.flush();
  }

  /** Decode the round once no live worker is still working (the decode runs on; its waiters' promises settle). */
  flush() {
    if (!this.waiting.length || this.waiting.length < this.live) return;
    const batch = this.waiting;
    this.waiting = [];
    this.decode(batch).then(() => {
      this.rounds += 1;
      for (const w of batch) w.resolve(w.strategy.results());
    }, (err) => { for (const w of batch) w.reject(err); }); // every waiting job throws it
  }

  /** The round's windows by width and output (language detection: one row; beam searches: k rows) apart. */
  async decode(batch) {
    const groups = new Map();
    for (const w of batch) {
      const key = `${w.strategy.rows}/${w.strategy.reads}`;
      if (!groups.has(key)) groups.set(key, []);
      groups.get(key).push(w);
    }
    for (const group of groups.values()) {
      await decodeTogether(this.cache, group.map((w) => w.window), group.map((w) => w.strategy));
    }
  }
}

/**
 * Each `job(runWindow)` (an async function), up to `workers` at a time, the answers in the jobs' order. The runner
 * is `runner` when given, else the workers' WindowRounds over `cache`. The first job to throw stops the others (at
 * their next job) and its error is thrown once every worker has stopped.
 */
export async function runJobs(jobs, workers, cache = null, runner = null) {
  const count = Math.max(1, Math.min(workers, jobs.length));
  const rounds = runner ? null : new WindowRounds(cache, count);
  const runWindow = runner ?? rounds.runWindow;
  const results = Array(jobs.length).fill(null);
  const errors = [];
  let next = 0;
  const work = async () => {
    try {
      while (!errors.length && next < jobs.length) {
        const index = next++;
        try {
          results[index] = await jobs[index](runWindow);
        } catch (err) {
          errors.push(err);
        }
      }
    } finally {
      rounds?.leave();
    }
  };
  await Promise.all(Array.from({ length: count }, work));
  if (errors.length) throw errors[0];
  return results;
}
