"""Export specs as data: per graph, the ordered inputs and outputs with dtypes and symbolic shapes.

One generic exporter (export.py) and the manifest read these; nothing here imports torch.
Axis names are the ONNX dimension names: batch, src_batch, src_len, tgt_len, past_len (batch: decoder
rows; src_batch: sources, whose encoder outputs the decoder takes once for all of a source's rows).
"""

from __future__ import annotations

from ..config import SOURCE_KINDS, TransformerConfig
from ..graph_io import EARLIER_LOGITS, GraphSpec, TensorSpec

# Symbolic dims that are free (dynamic) in the graphs; the rest are numbers fixed by the config.
DYNAMIC_AXES = ("batch", "src_batch", "src_len", "tgt_len", "past_len")
# Example sizes for tracing: never 0 or 1 on a dynamic axis (torch.export would specialise them),
# and all different so no two axes get unified by accident.
EXAMPLE_SIZES = {"batch": 6, "src_batch": 2, "src_len": 5, "tgt_len": 3, "past_len": 4}


def cross_names(i: int) -> tuple[str, str]:
    return f"cross.{i}.key", f"cross.{i}.value"


def past_names(i: int) -> tuple[str, str]:
    return f"past.{i}.self.key", f"past.{i}.self.value"


def present_names(i: int) -> tuple[str, str]:
    return f"present.{i}.self.key", f"present.{i}.self.value"


def _kv(names: tuple[str, str], heads: int, length: str, head_dim: int, dtype: str, batch: str = "batch"
        ) -> list[TensorSpec]:
    return [TensorSpec(n, dtype, (batch, heads, length, head_dim)) for n in names]


def encoder_input(config: TransformerConfig) -> TensorSpec:
    """The encoder's input declaration, from what the config's source kind reads (config.SOURCE_KINDS: its name,
    element type and axes). Runners read it back from the manifest (Manifest.encoder_input), never assume it."""
    kind = config.source_kind
    return TensorSpec(kind.input_name, kind.dtype, kind.input_axes(config))


# The token ids' input (a tokens config's encoder_input), and the float kinds' (features: Whisper's (batch, n_mels,
# n_frames), both fixed by the model; frames: (batch, src_len, n_feats), src_len free up to max_len).
TOKEN_IDS = TensorSpec(SOURCE_KINDS["tokens"].input_name, SOURCE_KINDS["tokens"].dtype,
                       ("batch", *SOURCE_KINDS["tokens"].axes))
features = frames = encoder_input  # a config of that source kind's input


def encoder_spec(config: TransformerConfig, dtype: str = "float32") -> GraphSpec:
    """The encoder input -> src_mask and every decoder layer's cross-attention keys/values.

    src_len is the token count, or with features the fixed n_frames // 2 (config.src_len): src_mask is
    then all True, and the decoder's contract (src_mask (src_batch, src_len), cross.*) is the same."""
    h, d, src_len = config.n_heads, config.head_dim, config.src_len or "src_len"
    outputs = [TensorSpec("src_mask", "bool", ("batch", src_len))]
    for i in range(config.n_decoder_layers):
        outputs += _kv(cross_names(i), h, src_len, d, dtype)
    return GraphSpec("encoder", "encoder.onnx", (encoder_input(config),), tuple(outputs))


def decoder_spec(config: TransformerConfig, dtype: str = "float32") -> GraphSpec:
    """One step (or a forced prefix) of the decoder with a growing self-attention cache: `logits` and `next_ids`
    of the last new position, and EARLIER_LOGITS of the new positions before it."""
    h, d, layers = config.n_heads, config.head_dim, range(config.n_decoder_layers)
    inputs = [TensorSpec("input_ids", "int64", ("batch", "tgt_len")),
              TensorSpec("src_mask", "bool", ("src_batch", "src_len"))]
    for i in layers:
        inputs += _kv(past_names(i), h, "past_len", d, dtype)
    for i in layers:
        inputs += _kv(cross_names(i), h, "src_len", d, dtype, "src_batch")
    outputs = [TensorSpec("logits", "float32", ("batch", config.tgt_vocab_size)),
               TensorSpec("next_ids", "int64", ("batch",))]
    for i in layers:
        outputs += _kv(present_names(i), h, "past_len + tgt_len", d, dtype)
    # after the caches: a speculative step checks k drafted ids in one call (runtime.decode.speculative)
    outputs.append(TensorSpec(EARLIER_LOGITS, "float32", ("batch", "tgt_len - 1", config.tgt_vocab_size)))
    return GraphSpec("decoder", "decoder.onnx", tuple(inputs), tuple(outputs))


GRAPH_SPECS = {"encoder": encoder_spec, "decoder": decoder_spec}


ALIGNMENT_NAME = "alignment"


def alignment_spec(config: TransformerConfig, dtype: str = "float32") -> GraphSpec:
    """The decoder over whole token sequences (no cache) -> the cross-attention weights of config.alignment_heads,
    (batch, heads, tgt_len, src_len) float32: what times each token in the audio (Whisper's word timestamps,
    runtime.speech.alignment). Row t is the attention while input_ids[t] is read, softmaxed over every source position."""
    h, d, layers, src_len = config.n_heads, config.head_dim, range(config.n_decoder_layers), config.src_len or "src_len"
    inputs = [TensorSpec("input_ids", "int64", ("batch", "tgt_len")),
              TensorSpec("src_mask", "bool", ("batch", src_len))]
    for i in layers:
        inputs += _kv(cross_names(i), h, src_len, d, dtype)
    heads = len(config.alignment_heads)
    outputs = [TensorSpec(ALIGNMENT_NAME, "float32", ("batch", heads, "tgt_len", src_len))]
    return GraphSpec(ALIGNMENT_NAME, "alignment.onnx", tuple(inputs), tuple(outputs))


def static_decoder_spec(config: TransformerConfig, dtype: str = "float32", slots: int | None = None) -> GraphSpec:
    """One step of the decoder over a pre-allocated cache of `slots` slots (default max_len; for CUDA
    graphs and in-flight batching). Fewer slots than max_len bound the tokens a row can generate, and
    make every step cheaper: attention and the slot write span the whole cache, filled or not.

    Every shape is fixed by (batch, src_len), so a captured CUDA graph can be replayed each step:
    `cache_len[b]` (the number of slots row b has filled, on the device) says where row b's keys and
    values go, which slots it may see and its position, so rows may be at different steps.
    `present.*` is the whole cache with each row's slot written; the runtime feeds it back as the
    next step's `past.*` (two buffers, swapped).
    """
    h, d, n, layers = config.n_heads, config.head_dim, slots or config.max_len, range(config.n_decoder_layers)
    inputs = [TensorSpec("input_ids", "int64", ("batch", 1)),
              TensorSpec("src_mask", "bool", ("batch", "src_len")),
              TensorSpec("cache_len", "int64", ("batch",))]
    for i in layers:
        inputs += _kv(past_names(i), h, n, d, dtype)
    for i in layers:
        inputs += _kv(cross_names(i), h, "src_len", d, dtype)
    outputs = [TensorSpec("logits", "float32", ("batch", config.tgt_vocab_size)),
               TensorSpec("next_ids", "int64", ("batch",))]
    for i in layers:
        outputs += _kv(present_names(i), h, n, d, dtype)
    return GraphSpec("decoder_static", "decoder_static.onnx", tuple(inputs), tuple(outputs))


def rows_decoder_spec(config: TransformerConfig, dtype: str = "float32", slots: int | None = None) -> GraphSpec:
    """decoder_static's step through ONNX Runtime's fused GroupQueryAttention (kv_cache.RowCache): the
    same inputs and outputs, but `present.*` may be bound to its `past.*` memory, and then the step
    writes slot cache_len[b] in place (runtime.states.host_rows: in-flight batching on CPU, where copying the
    cache into a second buffer every step cost a third of the step). Unbound, the slots after
    cache_len[b] of `present.*` are unspecified."""
    static = static_decoder_spec(config, dtype, slots)
    return GraphSpec("decoder_rows", "decoder_rows.onnx", static.inputs, static.outputs)


# Graphs exported only on request (ExportOptions.static_cache / --cuda-graph / --static-slots).
EXTRA_GRAPH_SPECS = {"decoder_static": static_decoder_spec, "decoder_rows": rows_decoder_spec}
ALL_GRAPH_SPECS = {**GRAPH_SPECS, **EXTRA_GRAPH_SPECS, ALIGNMENT_NAME: alignment_spec}
