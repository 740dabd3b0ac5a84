// Greedy decoding of a tfm-export folder, shared by Node (onnxruntime-node) and the browser
// (onnxruntime-web). The rules are those of the Python runtime (tfm_export/runtime/exported.py and
// tfm_export/decoding.py), so all three produce the same tokens.
//
// `ort` is the onnxruntime module; `model` is { manifest, encoder, decoder } with two
// ort.InferenceSession objects (see translate.mjs and ../web/app.mjs for how they are opened).
// It uses only globals common to Node and browsers, so the page imports this very file.

export const MANIFEST_FORMAT = 'tfm-export-manifest/1';
const SPECIALS = ['<pad>', '<bos>', '<eos>']; // ids 0, 1, 2 of every "chars" vocabulary
const EOS = 2;

/** Checks what this runtime reads from manifest.json; throws a one-line error naming the fix. */
export function checkManifest(manifest, where = 'manifest.json') {
  if (manifest?.format !== MANIFEST_FORMAT) {
    throw new Error(`${where} has format ${JSON.stringify(manifest?.format)}, this runtime reads ` +
      `${MANIFEST_FORMAT}; re-export the model with tfm-export`);
  }
  for (const name of ['encoder', 'decoder']) {
    const graph = manifest.graphs?.[name];
    if (!graph?.file || !/^[0-9a-f]{64}$/.test(graph.sha256 ?? '')) {
      throw new Error(`${where} has no valid graphs.${name} entry (file, sha256); re-export the model`);
    }
  }
  return manifest;
}

/** The files of one graph (the .onnx file and any external-data files) with their sha256. */
export function graphFiles(graph) {
  return { [graph.file]: graph.sha256, ...(graph.external_data ?? {}) };
}

/**
 * The manifest's tokenizer, or null when the export has none. Only type "chars" is implemented:
 * ids are positions in `src_vocab` / `tgt_vocab`, whose first `specials` entries are pad, bos, eos.
 */
export function makeTokenizer(spec) {
  if (!spec) return null;
  if (spec.type !== 'chars') {
    throw new Error(`tokenizer type "${spec.type}" is not supported by this runtime (only "chars"); ` +
      'use the Python runtime (tfm_export.runtime) or pass token ids');
  }
  const specials = spec.specials ?? SPECIALS.length;
  for (const name of ['src_vocab', 'tgt_vocab']) {
    if (!Array.isArray(spec[name]) || SPECIALS.some((s, i) => spec[name][i] !== s)) {
      throw new Error(`tokenizer ${name} must start with ${SPECIALS.join(', ')}; re-export the model`);
    }
  }
  const index = new Map();
  spec.src_vocab.forEach((ch, i) => { if (i >= specials) index.set(ch, i); });
  const allowed = spec.src_vocab.slice(specials).join('');
  const appendEos = spec.append_eos ?? true;
  return {
    /** Source text -> ids (+ eos when the manifest says so). */
    encode(text) {
      const chars = [...text];
      const unknown = [...new Set(chars.filter((ch) => !index.has(ch)))].sort().join('');
      if (unknown) {
        const shown = chars.length <= 60 ? text : `${chars.slice(0, 57).join('')}...`;
        throw new Error(`cannot encode ${JSON.stringify(unknown)} in ${JSON.stringify(shown)}: ` +
          `the model knows only the characters ${JSON.stringify(allowed)}`);
      }
      const ids = chars.map((ch) => index.get(ch));
      return appendEos ? [...ids, EOS] : ids;
    },
    /** Target ids -> text; special and out-of-range ids are skipped. */
    decode(ids) {
      return ids.filter((i) => i >= specials && i < spec.tgt_vocab.length).map((i) => spec.tgt_vocab[i]).join('');
    },
  };
}

/** Python's resolve_max_new_tokens: default fills the position table; too many is an error. */
export function resolveMaxNewTokens(maxNewTokens, maxLen) {
  const room = maxLen; // max_len - 1 (the BOS) + 1 (the last token is never fed back)
  if (maxNewTokens === undefined || maxNewTokens === null) return room;
  if (!Number.isInteger(maxNewTokens) || maxNewTokens < 1) {
    throw new Error(`maxNewTokens must be an integer of at least 1, got ${maxNewTokens}`);
  }
  if (maxNewTokens > room) {
    throw new Error(`maxNewTokens (${maxNewTokens}) does not fit the model's max_len (${maxLen}); use at most ${room}`);
  }
  return maxNewTokens;
}

/** Python's pad_batch and _check_source: right-padded, flattened source ids and the width. */
function padSources(config, sources) {
  if (!Array.isArray(sources) || sources.length === 0) {
    throw new Error('no sources given; pass at least one list of token ids');
  }
  for (const row of sources) {
    if (!Array.isArray(row)) throw new Error(`each source must be a list of token ids, got ${JSON.stringify(row)}`);
    for (const id of row) {
      if (!Number.isInteger(id) || id < 0 || id >= config.src_vocab_size) {
        throw new Error(`source id ${id} is out of range for a vocabulary of ${config.src_vocab_size} ids`);
      }
    }
  }
  const width = Math.max(...sources.map((s) => s.length));
  if (width === 0) throw new Error('every source is empty; pass at least one token id');
  if (width > config.max_len) {
    throw new Error(`source length ${width} exceeds the model's max_len (${config.max_len}); shorten or split the input`);
  }
  const flat = sources.flatMap((s) => [...s, ...Array(width - s.length).fill(config.src_pad_id)]);
  return { flat, width };
}

function int64(ort, values, dims) {
  return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
}

/** An empty past (batch, heads, 0, head_dim) in the decoder's cache dtype, read from the manifest. */
function emptyPast(ort, manifest, batch) {
  const spec = manifest.graphs.decoder.inputs.find((t) => t.name === 'past.0.self.key');
  const c = manifest.config;
  const [, heads = c.n_heads, , headDim = c.d_model / c.n_heads] = spec?.shape ?? [];
  const dtype = spec?.dtype ?? 'float32';
  const data = dtype === 'float16' ? new Uint16Array(0) : new Float32Array(0);
  return new ort.Tensor(dtype, data, [batch, heads, 0, headDim]);
}

/**
 * Greedy decoding of a batch of token id lists (right-padded here). Rows come back without BOS and
 * EOS, exactly like the Python runtime's generate_ids. `timings`, when given, receives
 * `encoderMs` and one `stepsMs` entry per decoder step.
 */
export async function generateIds(ort, model, sources, { maxNewTokens, timings } = {}) {
  const c = model.manifest.config;
  const { flat, width } = padSources(c, sources);
  const steps = resolveMaxNewTokens(maxNewTokens, c.max_len);
  const batch = sources.length;
  let start = performance.now();
  const enc = await model.encoder.run({ src_ids: int64(ort, flat, [batch, width]) });
  if (timings) Object.assign(timings, { encoderMs: performance.now() - start, stepsMs: [] });

  const feeds = { src_mask: enc.src_mask };
  const empty = emptyPast(ort, model.manifest, batch);
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
    start = performance.now();
    feeds.input_ids = int64(ort, tokens, [batch, 1]);
    const out = await model.decoder.run(feeds);
    const next = Array.from(out.next_ids.data, Number);
    for (let b = 0; b < batch; b++) {
      if (done[b]) next[b] = c.tgt_pad_id; // finished rows feed the padding id
      else if (next[b] === c.eos_id) done[b] = true;
      else rows[b].push(next[b]);
    }
    for (let i = 0; i < c.n_decoder_layers; i++) {
      for (const kv of ['key', 'value']) feeds[`past.${i}.self.${kv}`] = out[`present.${i}.self.${kv}`];
    }
    tokens = next;
    timings?.stepsMs.push(performance.now() - start);
  }
  return rows;
}
