// Token times from Whisper's cross-attention and their grouping into words: the port of
// tfm_export/runtime/speech/alignment.py (transformers' return_token_timestamps, and its tokenizer's word
// grouping); speech/words.mjs runs it on each window's alignment.onnx weights. The normalisation is
// numpy's float32 arithmetic, operation by operation (Math.fround), and the dynamic time warping keeps
// float32 costs, so that the same weights give Python's path, tie for tie.
// No globals beyond ECMAScript: a page can import it.

const TIME_PRECISION = 0.02; // seconds per encoder position
const MEDIAN_FILTER_WIDTH = 7;
const PREPEND = '"\'“¡¿([{-';
const APPEND = '"\'.。,，!！?？:：”)]}、';
const PUNCTUATION = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
const NO_SPACES = new Set(['zh', 'ja', 'th', 'lo', 'my', 'yue']);
const f32 = Math.fround;

/** numpy's x.mean(axis=-2) and x.std(axis=-2) of (heads, rows, cols) float32: rows summed in order, in float32. */
function rowStats(x, heads, rows, cols) {
  const mean = new Float32Array(heads * cols);
  const std = new Float32Array(heads * cols);
  for (let h = 0; h < heads; h++) {
    for (let c = 0; c < cols; c++) {
      let sum = x[h * rows * cols + c];
      for (let r = 1; r < rows; r++) sum = f32(sum + x[(h * rows + r) * cols + c]);
      const m = f32(sum / rows);
      let squares = 0;
      for (let r = 0; r < rows; r++) {
        const d = f32(x[(h * rows + r) * cols + c] - m);
        squares = r ? f32(squares + f32(d * d)) : f32(d * d);
      }
      mean[h * cols + c] = m;
      std[h * cols + c] = f32(Math.sqrt(f32(squares / rows)));
    }
  }
  return { mean, std };
}

/** The median of each `width` values along a row, edges reflected (transformers' _median_filter). */
export function medianFilter(row, width = MEDIAN_FILTER_WIDTH) {
  const pad = Math.floor(width / 2);
  const n = row.length;
  if (n <= pad) return Float32Array.from(row);
  const at = (i) => row[i < 0 ? -i : i >= n ? 2 * (n - 1) - i : i]; // numpy's "reflect"
  const out = new Float32Array(n);
  const window = new Float32Array(width);
  for (let i = 0; i < n; i++) {
    for (let k = 0; k < width; k++) window[k] = at(i - pad + k);
    window.sort();
    out[i] = window[pad];
  }
  return out;
}

/** The cheapest monotonic path through `matrix` (rows of Float64Array): [token indices, time indices]. */
export function dtw(matrix) {
  const rows = matrix.length;
  const cols = rows ? matrix[0].length : 0;
  const width = cols + 1;
  const cost = new Float32Array((rows + 1) * width).fill(Infinity);
  const trace = new Int8Array((rows + 1) * width).fill(-1);
  cost[0] = 0;
  for (let j = 1; j <= cols; j++) {
    for (let i = 1; i <= rows; i++) {
      const c0 = cost[(i - 1) * width + j - 1];
      const c1 = cost[(i - 1) * width + j];
      const c2 = cost[i * width + j - 1];
      const step = c0 < c1 && c0 < c2 ? 0 : c1 < c0 && c1 < c2 ? 1 : 2;
      cost[i * width + j] = matrix[i - 1][j - 1] + [c0, c1, c2][step];
      trace[i * width + j] = step;
    }
  }
  for (let j = 0; j <= cols; j++) trace[j] = 2;
  for (let i = 0; i <= rows; i++) trace[i * width] = 1;
  const text = [];
  const time = [];
  let [i, j] = [rows, cols];
  while (i > 0 || j > 0) {
    text.push(i - 1);
    time.push(j - 1);
    const move = trace[i * width + j];
    if (move === 0) { i -= 1; j -= 1; } else if (move === 1) i -= 1; else j -= 1;
  }
  return [text.reverse(), time.reverse()];
}

/**
 * weights (heads * rows * cols float32, row r read while generated token r was the input; every token but the
 * last has one) -> a time per generated token (seconds from the window's start; the last repeats the one before).
 */
export function tokenTimes(weights, heads, rows, cols, numFrames) {
  if (!rows) return [0];
  const kept = Math.min(cols, Math.floor(numFrames / 2));
  const x = new Float32Array(heads * rows * kept);
  for (let h = 0; h < heads; h++) {
    for (let r = 0; r < rows; r++) x.set(weights.subarray((h * rows + r) * cols, (h * rows + r) * cols + kept), (h * rows + r) * kept);
  }
  const { mean, std } = rowStats(x, heads, rows, kept);
  const matrix = Array.from({ length: rows }, () => new Float64Array(kept));
  const summed = Array.from({ length: rows }, () => new Float32Array(kept));
  for (let h = 0; h < heads; h++) {
    for (let r = 0; r < rows; r++) {
      const normal = new Float32Array(kept);
      for (let c = 0; c < kept; c++) {
        normal[c] = f32(f32(x[(h * rows + r) * kept + c] - mean[h * kept + c]) / std[h * kept + c]);
      }
      const filtered = medianFilter(normal);
      for (let c = 0; c < kept; c++) summed[r][c] = h ? f32(summed[r][c] + filtered[c]) : filtered[c];
    }
  }
  for (let r = 0; r < rows; r++) for (let c = 0; c < kept; c++) matrix[r][c] = -f32(summed[r][c] / heads);
  const [text, time] = dtw(matrix);
  const times = time.filter((_, k) => k === 0 || text[k] !== text[k - 1]).map((t) => t * TIME_PRECISION);
  return [...times, times[times.length - 1]];
}

/** Tokens grouped into whole characters (a group ends once its text has no incomplete UTF-8 the whole lacks). */
function splitOnCharacters(decode, tokens) {
  const full = decode(tokens);
  const words = [];
  const groups = [];
  let current = [];
  let offset = 0;
  for (const token of tokens) {
    current.push(token);
    const text = decode(current);
    if (!text.includes('\ufffd') || full[offset + text.indexOf('\ufffd')] === '\ufffd') {
      words.push(text);
      groups.push(current);
      current = [];
      offset += text.length;
    }
  }
  return [words, groups];
}

function splitOnSpaces(decode, tokens, specialFrom) {
  const words = [];
  const groups = [];
  const [texts, pieces] = splitOnCharacters(decode, tokens);
  texts.forEach((text, k) => {
    if (pieces[k][0] >= specialFrom || text.startsWith(' ') || PUNCTUATION.includes(text.trim()) || !words.length) {
      words.push(text);
      groups.push([...pieces[k]]);
    } else {
      words[words.length - 1] += text;
      groups[groups.length - 1].push(...pieces[k]);
    }
  });
  return [words, groups];
}

function mergePunctuation(words, groups) {
  let [i, j] = [words.length - 2, words.length - 1];
  while (i >= 0) {
    if (words[i].startsWith(' ') && PREPEND.includes(words[i].trim())) {
      [words[j], groups[j]] = [words[i] + words[j], [...groups[i], ...groups[j]]];
      [words[i], groups[i]] = ['', []];
    } else {
      j = i;
    }
    i -= 1;
  }
  [i, j] = [0, 1];
  while (j < words.length) {
    if (!words[i].endsWith(' ') && APPEND.includes(words[j])) {
      [words[i], groups[i]] = [words[i] + words[j], [...groups[i], ...groups[j]]];
      [words[j], groups[j]] = ['', []];
    } else {
      i = j;
    }
    j += 1;
  }
}

const round2 = (x) => Math.round(x * 100) / 100;

/** [{ word, start, end }] of `tokens`, `times` one longer (the start of the token after the last). */
export function words(decode, tokens, times, specialFrom, language = null) {
  const [texts, groups] = NO_SPACES.has(language) ? splitOnCharacters(decode, tokens)
    : splitOnSpaces(decode, tokens, specialFrom);
  let end = 0;
  const spans = groups.map((group) => { end += group.length; return Array.from(group, (_, k) => end - group.length + k); });
  mergePunctuation(texts, spans);
  return texts.flatMap((text, k) => (text
    ? [{ word: text, start: round2(times[spans[k][0]]), end: round2(times[spans[k][spans[k].length - 1] + 1]) }] : []));
}
