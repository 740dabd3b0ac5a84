// Greedy decoding with a tfm-export folder's graphs, shared by Node and the browser.
// `ort` is onnxruntime-node or onnxruntime-web; sessions are ort.InferenceSession objects.

/** The manifest's "chars" tokenizer: ids are positions in the vocab lists. */
export function makeTokenizer(spec) {
  if (!spec) return null;
  if (spec.type !== 'chars') throw new Error(`tokenizer type ${spec.type} is not supported here (only chars)`);
  const index = new Map(spec.src_vocab.map((ch, i) => [ch, i]));
  const EOS = 2;
  return {
    encode(text) {
      const chars = [...text];
      const unknown = chars.filter((ch) => !index.has(ch) || index.get(ch) < spec.specials);
      if (unknown.length) throw new Error(`cannot encode ${JSON.stringify(unknown.join(''))} in ${JSON.stringify(text)}`);
      const ids = chars.map((ch) => index.get(ch));
      return spec.append_eos ? [...ids, EOS] : ids;
    },
    decode(ids) {
      return ids.filter((i) => i >= spec.specials && i < spec.tgt_vocab.length).map((i) => spec.tgt_vocab[i]).join('');
    },
  };
}

function int64(ort, values, dims) {
  return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
}

function checkSources(config, sources) {
  if (!sources.length || sources.some((s) => !s.length)) throw new Error('every source needs at least one token id');
  for (const s of sources) for (const id of s) {
    if (!(id >= 0 && id < config.src_vocab_size)) {
      throw new Error(`source id ${id} is out of range for ${config.src_vocab_size} ids`);
    }
  }
  const width = Math.max(...sources.map((s) => s.length));
  if (width > config.max_len) throw new Error(`source length ${width} exceeds the model's max_len (${config.max_len})`);
  return width;
}

/**
 * Greedy decoding of id lists (right-padded here); rows come back without BOS/EOS, exactly like
 * the Python runtime. `onStep(ms)` receives each decoder step's time.
 */
export async function generateIds(ort, model, sources, { maxNewTokens, onStep } = {}) {
  const c = model.manifest.config;
  const width = checkSources(c, sources);
  const batch = sources.length;
  const steps = Math.min(maxNewTokens ?? c.max_len, c.max_len);
  const flat = sources.flatMap((s) => [...s, ...Array(width - s.length).fill(c.src_pad_id)]);
  const enc = await model.encoder.run({ src_ids: int64(ort, flat, [batch, width]) });
  const empty = new ort.Tensor('float32', new Float32Array(0), [batch, c.n_heads, 0, c.d_model / c.n_heads]);
  const feeds = { src_mask: enc.src_mask };
  for (let i = 0; i < c.n_decoder_layers; i++) {
    for (const kv of ['key', 'value']) {
      feeds[`cross.${i}.${kv}`] = enc[`cross.${i}.${kv}`];
      feeds[`past.${i}.self.${kv}`] = empty;
    }
  }
  let tokens = Array(batch).fill(c.bos_id);
  const done = Array(batch).fill(false);
  const rows = sources.map(() => []);
  for (let step = 0; step < steps && !done.every(Boolean); step++) {
    const start = performance.now();
    feeds.input_ids = int64(ort, tokens, [batch, 1]);
    const out = await model.decoder.run(feeds);
    const next = Array.from(out.next_ids.data, Number);
    for (let b = 0; b < batch; b++) {
      if (done[b]) next[b] = c.tgt_pad_id;
      else if (next[b] === c.eos_id) done[b] = true;
      else rows[b].push(next[b]);
    }
    for (let i = 0; i < c.n_decoder_layers; i++) {
      for (const kv of ['key', 'value']) feeds[`past.${i}.self.${kv}`] = out[`present.${i}.self.${kv}`];
    }
    tokens = next;
    onStep?.(performance.now() - start);
  }
  return rows;
}
