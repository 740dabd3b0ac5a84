// CTranslate2's vocabulary map (`use_vmap`): the port of tfm_export/runtime/decode/vmap.py (its docstring is the
// specification). A map holds, per source token, the target tokens translations of sentences with it use most, and
// a fixed set of frequent target tokens; a batch's shortlist is the union of its source tokens' candidates, the
// fixed set and the model's own tokens (EOS, the decoder start, a forced first token), and the decoder's head then
// chooses among those only (states/shortlist.mjs). `fromPairs` builds one from parallel data (ids) exactly as
// Python's from_pairs does, so a map made on either side gives the same shortlists.
// Files: Python's JSON `{"fixed": [ids], "map": {"source id": [target ids]}}` (`fromJSON`, `toJSON`; exported.mjs's
// `loadVocabularyMap` reads a file), or CTranslate2's text format (`fromCt2`: `source<TAB>target target ...` per
// line, an empty source for the fixed set) with the tokenizer's piece-to-id lookups.
// No globals beyond ECMAScript: the browser page may import this file.

const sortedIds = (ids) => [...ids].sort((a, b) => a - b);

/** Source id -> candidate target ids, and the target ids every shortlist has (Python's VocabularyMap). */
export class VocabularyMap {
  /** `fixed`: target ids; `candidates`: a Map (or an object) of source id -> target ids. */
  constructor(fixed = [], candidates = new Map()) {
    this.fixed = sortedIds(new Set(fixed.map(Number)));
    const entries = candidates instanceof Map ? [...candidates] : Object.entries(candidates);
    this.candidates = new Map(entries.map(([s, t]) => [Number(s), sortedIds(new Set(t.map(Number)))]));
  }

  /** The sorted ids of the fixed set, each source token's candidates, and `always` (the model's own). */
  shortlist(sources, always = []) {
    const ids = new Set([...this.fixed, ...always.map(Number)]);
    for (const row of sources) {
      for (const token of row) for (const id of this.candidates.get(Number(token)) ?? []) ids.add(id);
    }
    return sortedIds(ids);
  }

  /**
   * A map from parallel data (source ids, target ids) by co-occurrence within a pair (Python's from_pairs): per
   * source token its `perToken` target tokens of the highest lift P(t in the translation | token in the source) -
   * P(t in a translation) above 0 (ties: the lower id), and the `frequent` most common target tokens.
   */
  static fromPairs(sources, targets, { perToken = 40, frequent = 100 } = {}) {
    const together = new Map(); // source token -> Map(target token -> pairs with both)
    const seen = new Map(); const inPairs = new Map(); const total = new Map();
    const bump = (counter, key) => counter.set(key, (counter.get(key) ?? 0) + 1);
    let pairs = 0;
    const count = Math.min(sources.length, targets.length);
    for (let i = 0; i < count; i++) {
      const words = new Set(targets[i].map(Number));
      pairs += 1;
      for (const t of words) bump(inPairs, t);
      for (const t of targets[i]) bump(total, Number(t));
      for (const token of new Set(sources[i].map(Number))) {
        bump(seen, token);
        if (!together.has(token)) together.set(token, new Map());
        for (const t of words) bump(together.get(token), t);
      }
    }
    const candidates = new Map();
    for (const [token, counts] of together) {
      const lift = new Map([...counts].map(([t, c]) => [t, c / seen.get(token) - inPairs.get(t) / pairs]));
      const best = [...lift.keys()].sort((a, b) => lift.get(b) - lift.get(a) || a - b).slice(0, perToken);
      candidates.set(token, best.filter((t) => lift.get(t) > 0));
    }
    return new VocabularyMap(mostCommon(total, frequent), candidates);
  }

  /** Python's `save` format: { fixed, map: { "source id": [target ids] } }, sources in order. */
  toJSON() {
    const map = {};
    for (const s of sortedIds(this.candidates.keys())) map[String(s)] = this.candidates.get(s);
    return { fixed: this.fixed, map };
  }

  /**
   * A map of Python's `save` format (parsed JSON); one line naming the format when it is not one (an object with
   * neither `fixed` nor `map`, which Python's load reads as an empty map, is refused: it is some other JSON file).
   */
  static fromJSON(data, where = 'the vocabulary map') {
    const ids = (list) => Array.isArray(list) && list.every(Number.isInteger);
    const map = data?.map ?? {};
    if (typeof data !== 'object' || data === null || Array.isArray(data) || !('fixed' in data || 'map' in data)
        || !ids(data.fixed ?? [])
        || typeof map !== 'object' || Array.isArray(map) || !Object.entries(map).every(([s, t]) => /^\d+$/.test(s) && ids(t))) {
      throw new Error(`${where} is not a vocabulary map ({"fixed": [...], "map": {...}})`);
    }
    return new VocabularyMap(data.fixed ?? [], map);
  }

  /**
   * CTranslate2's vmap text, its tokens looked up with `sourceId` / `targetId` (piece -> id, or null/undefined:
   * dropped), as Python's load_ct2: a line whose source is several tokens counts for each of them.
   */
  static fromCt2(text, sourceId, targetId) {
    const known = (lookup, pieces) => pieces.map(lookup).filter((i) => i !== null && i !== undefined);
    const fixed = new Set(); const candidates = new Map();
    for (const line of text.split(/\r?\n/)) {
      const tab = line.indexOf('\t');
      const [source, target] = tab < 0 ? [line, ''] : [line.slice(0, tab), line.slice(tab + 1)];
      const ids = known(targetId, target.split(/\s+/).filter(Boolean));
      if (!source.trim()) ids.forEach((i) => fixed.add(i));
      for (const key of known(sourceId, source.split(/\s+/).filter(Boolean))) {
        if (!candidates.has(key)) candidates.set(key, new Set());
        ids.forEach((i) => candidates.get(key).add(i));
      }
    }
    return new VocabularyMap([...fixed], new Map([...candidates].map(([k, v]) => [k, [...v]])));
  }
}

/**
 * Python's Counter.most_common(n) keys: the highest counts, equal counts in first-seen order (a Map keeps
 * insertion order and Array.prototype.sort is stable, as Python's sorted is).
 */
function mostCommon(counter, n) {
  return [...counter].sort((a, b) => b[1] - a[1]).slice(0, n).map(([key]) => key);
}
