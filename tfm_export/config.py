"""The model configuration: one frozen dataclass, saved beside the weights and rebuilt from them.

This module imports no torch, so the torch-free runtime can read a config from a manifest.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

# gelu is the exact (erf) GELU; gelu_tanh its tanh approximation (transformers' gelu_new, T5 v1.1's).
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
# Marian and fairseq call SiLU "swish"; checkpoints carry either name.
ACTIVATION_ALIASES = {"swish": "silu"}

# How sinusoidal tables are laid out is a real difference between frameworks: the paper
# interleaves sin/cos over even/odd dims; Marian and Pegasus put all sines first
# (sinusoidal_concat); fairseq (M2M100, NLLB) puts all sines first too but spaces the frequencies
# by half_dim - 1 instead of half_dim (sinusoidal_fairseq). T5 has no absolute positions (none):
# its attention adds a learned bias by relative distance (relative_buckets).
POSITIONS = ("sinusoidal", "sinusoidal_concat", "sinusoidal_fairseq", "learned", "none")
# What the encoder reads: token ids through an embedding table (every text model), log-mel features
# (batch, n_mels, frames) through Whisper's two convolutions (the second halves the frames), or
# variable-length frames (batch, frames, n_feats) through one Linear, padded frames being NaN
# (users' own speech models over filterbank frames, seed 001).


@dataclass(frozen=True)
class SourceKind:
    """What differs between the encoder's inputs (config.source), as data in one table: the config reads it to
    check a config, export.specs to declare the input, the model and the runners to batch and mask it, the
    checks to draw example sources. Why a table: the kinds were branched on (`source == "features"`) in a dozen
    places that each had to know all three; a new kind is now one record (and the per-layer tables keyed by
    its name that hold code needing torch: model.frontend's modules, export.validate's random inputs, which a
    test keeps complete)."""

    name: str  # config.source
    input_name: str  # the encoder input's name in the graph (export.specs)
    dtype: str  # its element type
    axes: tuple[str, ...]  # its axes after the batch: a config field's name is that field's value (fixed size)
    sizes: Mapping[str, int]  # the config fields this kind needs -> their least value
    ids: bool  # token ids (a tokenizer encodes text into them; an embedding reads them), else float values
    masked: bool  # the encoder masks padded positions (ids, frames); whole windows have none to mask
    reads: str  # what the encoder reads, in the words of a refusal ("reads tokens, not frames")

    def input_axes(self, config: Any) -> tuple[Any, ...]:
        """The input's axes with the batch axis, each config field's name replaced by its value."""
        return ("batch", *(getattr(config, axis) if axis in self.sizes else axis for axis in self.axes))


SOURCE_KINDS = {kind.name: kind for kind in (
    # transformers' name of text models' input; the runners read it back from the manifest, never assume it
    SourceKind("tokens", "src_ids", "int64", ("src_len",), {}, ids=True, masked=True, reads="tokens"),
    # Whisper's log-mel windows, whose length the convolutions and the position table fix (transformers' name)
    SourceKind("features", "input_features", "float32", ("n_mels", "n_frames"), {"n_mels": 2, "n_frames": 2},
               ids=False, masked=False, reads="features"),
    # a filterbank's frames, of free length up to max_len; a padded frame is all NaN, which the encoder masks
    SourceKind("frames", "input_frames", "float32", ("src_len", "n_feats"), {"n_feats": 1}, ids=False,
               masked=True, reads="frames"),
)}
SOURCES = tuple(SOURCE_KINDS)
# The normalisation of every block: LayerNorm, or T5's RMS norm (no mean subtraction, no bias).
NORMS = ("layer", "rms")

# Softmax temperature of attention. The paper divides by sqrt(head_dim); the widely
# copied "Transformer from scratch" tutorial divides by sqrt(d_model).
ATTENTION_SCALES: dict[str, Callable[["TransformerConfig"], float]] = {
    "head_dim": lambda c: 1.0 / math.sqrt(c.head_dim),
    "d_model": lambda c: 1.0 / math.sqrt(c.d_model),
    "none": lambda c: 1.0,
}


@dataclass(frozen=True)
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer ("Attention is all you need" family)."""

    src_vocab_size: int  # number of source token ids
    tgt_vocab_size: int  # number of target token ids (the output layer's width)
    d_model: int = 512  # width of every residual stream
    n_heads: int = 8  # attention heads per attention block; d_model must divide evenly
    n_encoder_layers: int = 6  # encoder blocks
    n_decoder_layers: int = 6  # decoder blocks
    d_ff: int = 2048  # hidden width of the position-wise feed-forward network
    dropout: float = 0.1  # dropout used in training only; export runs in eval mode
    activation: str = "relu"  # feed-forward activation: relu, gelu or silu (alias swish)
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN
    positions: str = "sinusoidal"  # sinusoidal (interleaved), sinusoidal_concat or learned
    max_len: int = 256  # longest source or target sequence (size of the position table)
    src_pad_id: int = 0  # source padding id; masked out of attention
    tgt_pad_id: int = 0  # target padding id; fills finished rows during batched decoding
    bos_id: int = 1  # first decoder input (the "decoder start" token)
    eos_id: int = 2  # decoding of a row stops after this id
    scale_embeddings: bool = True  # multiply token embeddings (and projected frames) by sqrt(d_model) (the paper)
    final_norm: bool = False  # a LayerNorm after the last encoder and decoder block
    share_embeddings: bool = False  # one embedding table for source and target
    tie_output: bool = False  # output projection reuses the target embedding matrix
    output_bias: bool = True  # the output projection has a bias (Marian: final_logits_bias)
    attention_scale: str = "head_dim"  # key of ATTENTION_SCALES
    layer_norm_eps: float = 1e-5  # epsilon of every LayerNorm
    suppress_ids: tuple[int, ...] = ()  # ids never generated (Marian bans its pad id)
    # --- Hugging Face families; each default is the paper's model -------------------------------
    position_offset: int = 0  # table rows before position 0 (BART's learned table, M2M100's padding offset: 2)
    embed_norm: bool = False  # a norm right after token + position embeddings (BART's layernorm_embedding)
    norm: str = "layer"  # layer (LayerNorm) or rms (T5); key of NORMS
    d_head: int | None = None  # width of one head when n_heads * d_head != d_model (T5's d_kv); None: d_model / n_heads
    attention_bias: bool = True  # the q/k/v/out projections have biases (T5's have none)
    ffn_bias: bool = True  # the feed-forward layers have biases (T5's have none)
    ffn_gated: bool = False  # feed-forward fc2(act(fc1(x)) * gate(x)) (T5 v1.1's gated-gelu)
    relative_buckets: int = 0  # T5's relative attention bias: buckets of distance per head (0: none)
    relative_max_distance: int = 128  # T5: distances from here on share the last (log-spaced) bucket
    output_scale: bool = False  # decoder output times d_model ** -0.5 before the head (T5 with a tied head)
    # --- Speech (Whisper); each default keeps the text models as they are --------------------------
    # "features": the encoder reads (batch, n_mels, n_frames) float32 log-mel features through two Conv1d
    # + GELU (the second of stride 2) instead of a source token embedding; src_vocab_size and src_pad_id
    # then name no embedding (set them to the target's) and src_mask is all True.
    source: str = "tokens"  # key of SOURCES
    n_mels: int = 0  # mel bins of the features (Whisper 80; large-v3 128); 0 with token sources
    n_frames: int = 0  # feature frames per source, fixed (3000: 30 s); the encoder sees n_frames // 2 positions
    # The encoder's position kind when it differs from the decoder's `positions` (None: the same).
    # Whisper: "learned", i.e. its saved (sinusoidal) embed_positions table of n_frames // 2 rows, read as is.
    encoder_positions: str | None = None
    # k_proj has a bias when attention_bias does. Whisper's has none: a key bias adds the same amount to
    # all of a query's scores, which the softmax cancels.
    key_bias: bool = True
    # "frames": the encoder reads (batch, src_len, n_feats) float32 frames (e.g. 80 filterbank bins) through one
    # Linear(n_feats, d_model) in the source embedding's place, plus the encoder's positions; src_len varies
    # (up to max_len) and a padded frame is all NaN (the runtime pads from each source's length), which the
    # mask reads as token sources' src_pad_id. src_vocab_size and src_pad_id then name no embedding.
    n_feats: int = 0  # values per frame with a frames source; 0 otherwise
    # (decoder layer, head) pairs whose cross-attention follows the audio in time (Whisper's generation_config
    # alignment_heads): with any, the export has alignment.onnx, whose weights time each token (word timestamps).
    alignment_heads: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        act = ACTIVATION_ALIASES.get(self.activation, self.activation)
        object.__setattr__(self, "activation", act)
        object.__setattr__(self, "suppress_ids", tuple(int(i) for i in self.suppress_ids))
        object.__setattr__(self, "alignment_heads", tuple((int(layer), int(head)) for layer, head in
                                                          self.alignment_heads))
        self._validate()

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.d_head or self.d_model // self.n_heads

    @property
    def inner_dim(self) -> int:
        """Width of the attention's concatenated heads (d_model unless d_head says otherwise)."""
        return self.n_heads * self.head_dim

    @property
    def src_len(self) -> int | None:
        """The encoder's (fixed) output length with a features source; None: as long as the tokens."""
        return self.n_frames // 2 if self.source == "features" else None  # frames: as many as given

    @property
    def attn_scale(self) -> float:
        """Factor applied to query-key dot products before the softmax."""
        return ATTENTION_SCALES[self.attention_scale](self)

    def _validate(self) -> None:
        positive = ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_encoder_layers",
                    "n_decoder_layers", "d_ff", "max_len")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"config.{name} must be a positive integer, got {value!r}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(f"config.d_model ({self.d_model}) must be divisible by "
                             f"config.n_heads ({self.n_heads})")
        for name in ("d_head", "relative_max_distance"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise ValueError(f"config.{name} must be a positive integer, got {value!r}")
        for name in ("position_offset", "relative_buckets"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"config.{name} must be an integer of at least 0, got {value!r}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"config.dropout must be in [0, 1), got {self.dropout}")
        if self.layer_norm_eps <= 0:
            raise ValueError(f"config.layer_norm_eps must be positive, got {self.layer_norm_eps}")
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("positions", self.positions, POSITIONS)
        _check_choice("encoder_positions", self.encoder_positions or self.positions, POSITIONS)
        _check_choice("source", self.source, SOURCES)
        self._validate_features()
        _check_choice("norm", self.norm, NORMS)
        _check_choice("attention_scale", self.attention_scale, tuple(ATTENTION_SCALES))
        self._validate_ids()
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError("config.share_embeddings needs src_vocab_size == tgt_vocab_size "
                             f"({self.src_vocab_size} != {self.tgt_vocab_size})")

    @property
    def source_kind(self) -> SourceKind:
        """What the encoder reads (SOURCE_KINDS[source])."""
        return SOURCE_KINDS[self.source]

    def _validate_features(self) -> None:
        if self.source_kind.ids:
            return
        if self.share_embeddings:
            raise ValueError(f"config.share_embeddings needs a token source (a {self.source} source has no embedding)")
        for name, least in self.source_kind.sizes.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"config.{name} must be an integer of at least {least} with a {self.source} "
                                 f"source, got {value!r}")
        if self.source == "features" and self.n_frames % 2:
            raise ValueError(f"config.n_frames ({self.n_frames}) must be even: the stride-2 convolution halves it")

    def _validate_ids(self) -> None:
        for name, vocab in (("src_pad_id", self.src_vocab_size), ("tgt_pad_id", self.tgt_vocab_size),
                            ("bos_id", self.tgt_vocab_size), ("eos_id", self.tgt_vocab_size)):
            value = getattr(self, name)
            if not 0 <= value < vocab:
                raise ValueError(f"config.{name} ({value}) is out of range for a vocabulary "
                                 f"of {vocab} ids")
        for layer, head in self.alignment_heads:
            if not (0 <= layer < self.n_decoder_layers and 0 <= head < self.n_heads):
                raise ValueError(f"config.alignment_heads has ({layer}, {head}), not a head of the "
                                 f"{self.n_decoder_layers} x {self.n_heads} decoder layers and heads")
        for value in self.suppress_ids:
            if not 0 <= value < self.tgt_vocab_size:
                raise ValueError(f"config.suppress_ids has {value}, out of range for "
                                 f"{self.tgt_vocab_size} target ids")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the form stored in checkpoints and manifests)."""
        data = dataclasses.asdict(self)
        data["suppress_ids"] = list(self.suppress_ids)
        data["alignment_heads"] = [list(pair) for pair in self.alignment_heads]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "TransformerConfig":
        """Rebuild a config; unknown keys are an error so typos are not silently ignored."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown config keys: {', '.join(unknown)}")
        return cls(**dict(data))

    def replace(self, **changes: Any) -> "TransformerConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"config.{name} must be one of {', '.join(choices)}; got {value!r}")


PRESETS: dict[str, TransformerConfig] = {
    # Small enough for tests and a quick try of every command.
    "tiny": TransformerConfig(src_vocab_size=64, tgt_vocab_size=64, d_model=32, n_heads=4,
                              n_encoder_layers=2, n_decoder_layers=2, d_ff=64, max_len=64),
    # The paper's base sizes; used for the benchmarks.
    "base": TransformerConfig(src_vocab_size=8000, tgt_vocab_size=8000, d_model=512, n_heads=8,
                              n_encoder_layers=6, n_decoder_layers=6, d_ff=2048, max_len=256),
}
