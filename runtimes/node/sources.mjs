// The sources of one call as the encoder reads them: the port of tfm_export/runtime/sources.py (the
// checks and padding of pad_batch, source_batch and feature_batch, resolve_max_new_tokens, trim) with the
// encoder's declared input (Python's Manifest.encoder_input) and its feeds (runtime.states.nocache's
// encoder_feeds, which Node's every decoder state shares). `ort` is the onnxruntime module (node or web).
// No globals beyond ECMAScript: the browser page imports this file too.

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

// The encoder's input when the manifest declares none: token ids, (batch, src_len) (export/specs.py).
const SOURCE_IDS = { name: 'src_ids', dtype: 'int64', shape: ['batch', 'src_len'] };
// The id types an encoder may declare, each with the TypedArray that holds ids (plain numbers) in it.
const ID_ARRAYS = { int64: (ids) => BigInt64Array.from(ids, BigInt), int32: (ids) => Int32Array.from(ids) };
const BATCH_AXES = ['batch', 'src_batch']; // the manifests' names of a source batch axis (specs.DYNAMIC_AXES)

export const SOURCE_MASK = 'src_mask'; // bool (batch, src_len), true = a real token: a module export's second input

/**
 * The encoder's input as manifest.json declares it (graphs.encoder.inputs): { name, dtype, shape,
 * batchFirst, mask }, refused in one line unless its first input holds token ids (int64 or int32) on a
 * batch axis and a `src_len` axis, in either order, and any other is the mask of real tokens (`mask`:
 * a module export's encoder reads one). Manifests that declare no inputs get SOURCE_IDS.
 */
export function sourceInput(manifest, where = 'manifest.json') {
  const declared = manifest.graphs?.encoder?.inputs;
  if (declared === undefined || declared === null) return { ...SOURCE_IDS, batchFirst: true, mask: false };
  const what = `${where} graphs.encoder`;
  const extra = Array.isArray(declared) ? declared.slice(1).map((t) => t?.name) : [];
  if (!Array.isArray(declared) || declared.length === 0 || extra.some((name) => name !== SOURCE_MASK)) {
    throw new Error(`${what} declares ${declared?.length ?? 'no list of'} inputs; this runtime feeds one (the source ` +
      `token ids) or two (and ${SOURCE_MASK}, as a module export's): re-export the model or decode it with the Python runtime`);
  }
  const [{ name, dtype, shape }] = declared;
  if (isFeatures(declared[0])) return { name, dtype, shape, features: true, batchFirst: true, mask: false };
  if (!ID_ARRAYS[dtype]) {
    throw new Error(`${what} input ${JSON.stringify(name)} is ${dtype}; this runtime feeds token ids as int64 or int32`);
  }
  const batchAt = Array.isArray(shape) ? shape.findIndex((axis) => BATCH_AXES.includes(axis)) : -1;
  if (shape?.length !== 2 || batchAt < 0 || shape.indexOf('src_len') !== 1 - batchAt) {
    throw new Error(`${what} input ${JSON.stringify(name)} has axes ${JSON.stringify(shape)}; this runtime feeds ` +
      '(batch, src_len) or (src_len, batch)');
  }
  return { name, dtype, shape, batchFirst: batchAt === 0, mask: extra.length > 0 };
}

/**
 * Whether an encoder input is Whisper's log-mel features: float32 (batch, n_mels, frames), fixed
 * n_mels and frames (one window). Such an export decodes audio (speech/whisper.mjs: transcribe), not ids.
 */
function isFeatures({ dtype, shape }) {
  return dtype === 'float32' && shape?.length === 3 && BATCH_AXES.includes(shape[0]) && Number.isInteger(shape[1])
    && Number.isInteger(shape[2]);
}

/** (batch, n_mels, frames) float32 of one Float32Array (n_mels * frames, row-major) per source. */
export function featureTensor(ort, input, sources) {
  const [, nMels, frames] = input.shape;
  if (!Array.isArray(sources) || sources.length === 0) throw new Error('no sources given; pass at least one feature window');
  const data = new Float32Array(sources.length * nMels * frames);
  sources.forEach((features, i) => {
    if (!(features instanceof Float32Array) || features.length !== nMels * frames) {
      throw new Error(`each source of this export is a Float32Array of ${nMels} x ${frames} log-mel features; ` +
        `got ${features?.constructor?.name} of ${features?.length}`);
    }
    data.set(features, i * nMels * frames);
  });
  return new ort.Tensor('float32', data, [sources.length, nMels, frames]);
}

/** Python's pad_batch and source_batch: the sources checked and right-padded to one width. */
export function padSources(config, sources) {
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
  return sources.map((s) => [...s, ...Array(width - s.length).fill(config.src_pad_id)]);
}

/** The padded sources as the encoder's declared input (`sourceInput`): its type, its axis order. */
export function sourceTensor(ort, input, padded) {
  const [batch, width] = [padded.length, padded[0].length];
  const values = input.batchFirst ? padded.flat()
    : Array.from({ length: width * batch }, (_, i) => padded[i % batch][Math.floor(i / batch)]);
  return new ort.Tensor(input.dtype, ID_ARRAYS[input.dtype](values), input.batchFirst ? [batch, width] : [width, batch]);
}

/** (batch, src_len) bool, true = a real token (Python's `src != src_pad_id`): module exports' src_mask. */
export function maskTensor(ort, padded, padId) {
  return new ort.Tensor('bool', Uint8Array.from(padded.flat(), (id) => (id === padId ? 0 : 1)),
    [padded.length, padded[0].length]);
}

/** The encoder's feeds (Python's encoder_feeds): the source ids and, when it reads one, src_mask. */
export function encoderFeeds(ort, manifest, padded) {
  const input = sourceInput(manifest);
  if (input.features) return { [input.name]: featureTensor(ort, input, padded) };
  const feeds = { [input.name]: sourceTensor(ort, input, padded) };
  if (input.mask) feeds[SOURCE_MASK] = maskTensor(ort, padded, manifest.config.src_pad_id);
  return feeds;
}

/** An int64 tensor of plain numbers. */
export function int64(ort, values, dims) {
  return new ort.Tensor('int64', BigInt64Array.from(values, (v) => BigInt(v)), dims);
}

/** Python's trim: a generated row cut at its first EOS (exclusive). */
export function trim(row, eosId) {
  const at = row.indexOf(eosId);
  return at < 0 ? row.slice() : row.slice(0, at);
}
