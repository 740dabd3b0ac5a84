"""CTranslate2 as a benchmark peer: our weights through its Python spec API (optional extra).

CTranslate2 decodes in one call, so its per-step times are derived from two runs on the same
inputs: one step (encoder + first step) and N steps; per-token = (t_N - t_1) / (N - 1).
"""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import ConfigError
from ..model.transformer import Transformer
from ..runtime.exported import DecodeTimings
from ..runtime.options.generation import GenerationConfig

ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH"}


def _specs() -> Any:
    try:
        import ctranslate2.specs as specs
    except ImportError:
        raise ConfigError("the CTranslate2 peer needs: pip install 'tfm-export[ctranslate2]'") from None
    return specs


def vocabulary(model: Transformer, size: int) -> list[str]:
    """Token strings for ids; CTranslate2 finds the special tokens by these names."""
    cfg = model.config
    names = {cfg.bos_id: "<s>", cfg.eos_id: "</s>", cfg.tgt_pad_id: "<unk>"}
    return [names.get(i, f"t{i}") for i in range(size)]


def unsupported(cfg: Any) -> str | None:
    """Why this converter cannot write a model of `cfg`, or None when it can."""
    if cfg.attention_scale != "head_dim" or cfg.suppress_ids:
        return "CTranslate2 supports only the paper's attention scale and no suppressed ids"
    return None


def convert(model: Transformer, out_dir: str | Path) -> Path:
    """Write `model` as a CTranslate2 model directory (float32; quantise at load time)."""
    specs = _specs()
    cfg = model.config
    if reason := unsupported(cfg):
        raise ConfigError(reason)
    spec = specs.TransformerSpec.from_config(
        (cfg.n_encoder_layers, cfg.n_decoder_layers), cfg.n_heads, pre_norm=cfg.norm_first,
        no_final_norm=not cfg.final_norm, activation=getattr(specs.Activation, ACTIVATIONS[cfg.activation]))
    _embeddings(spec.encoder, model.src_embed, cfg, list_form=True)
    _embeddings(spec.decoder, model.tgt_embed, cfg, list_form=False)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn, layer.norm1, fused=True)
        _ffn(layer_spec.ffn, layer.ffn, layer.norm2)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attn, layer.norm1, fused=True)
        _attention(layer_spec.attention, layer.cross_attn, layer.norm2, fused=False)
        _ffn(layer_spec.ffn, layer.ffn, layer.norm3)
    if cfg.final_norm:
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    _linear(spec.decoder.projection, model.lm_head)
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps
    spec.register_source_vocabulary(vocabulary(model, cfg.src_vocab_size))
    spec.register_target_vocabulary(vocabulary(model, cfg.tgt_vocab_size))
    spec.validate()
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    spec.save(str(out_dir))
    return Path(out_dir)


def _np(tensor: Any) -> Any:
    return tensor.detach().cpu().numpy()


def _linear(spec: Any, linear: Any) -> None:
    spec.weight = _np(linear.weight)
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _norm(spec: Any, norm: Any) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _embeddings(spec: Any, embed: Any, cfg: Any, list_form: bool) -> None:
    target = spec.embeddings[0] if list_form else spec.embeddings
    target.weight = _np(embed.tokens.weight)
    spec.scale_embeddings = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
    spec.position_encodings.encodings = _np(embed.position_table())  # our table, explicitly


def _attention(spec: Any, attn: Any, norm: Any, fused: bool) -> None:
    import numpy as np

    weights = [_np(p.weight) for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
    biases = [_np(p.bias) for p in (attn.q_proj, attn.k_proj, attn.v_proj)]
    if fused:  # self-attention: one (3*d, d) projection
        spec.linear[0].weight, spec.linear[0].bias = np.concatenate(weights), np.concatenate(biases)
    else:  # cross-attention: queries, then fused keys/values
        spec.linear[0].weight, spec.linear[0].bias = weights[0], biases[0]
        spec.linear[1].weight, spec.linear[1].bias = np.concatenate(weights[1:]), np.concatenate(biases[1:])
    _linear(spec.linear[-1], attn.out_proj)
    _norm(spec.layer_norm, norm)


def _ffn(spec: Any, ffn: Any, norm: Any) -> None:
    _linear(spec.linear_0, ffn.fc1)
    _linear(spec.linear_1, ffn.fc2)
    _norm(spec.layer_norm, norm)


class CT2Runner:
    """The benchmark Runner protocol over a ctranslate2.Translator."""

    separate_encoder = False  # its encoder runs inside translate_batch: bench shows no encoder_ms for it

    def __init__(self, model: Transformer, device: str = "cpu", compute_type: str = "float32",
                 threads: int | None = None):
        import ctranslate2

        self.config = model.config
        self._tmp = tempfile.TemporaryDirectory(prefix="tfm-ct2-")
        convert(model, Path(self._tmp.name) / "model")
        self.vocab = vocabulary(model, model.config.tgt_vocab_size)
        self.translator = ctranslate2.Translator(str(Path(self._tmp.name) / "model"), device=device.split(":")[0],
                                                 compute_type=compute_type, inter_threads=1,
                                                 intra_threads=threads or 0)

    def _run(self, tokens: list[list[str]], steps: int, fixed: bool = True, beams: int = 1) -> list[list[int]]:
        results = self.translator.translate_batch(tokens, beam_size=beams, max_decoding_length=steps,
                                                  min_decoding_length=steps if fixed else 0)
        index = {t: i for i, t in enumerate(self.vocab)}
        return [[index[t] for t in r.hypotheses[0]] for r in results]

    def generate_ids(self, sources: Sequence[Sequence[int]], max_new_tokens: int | None = None,
                     stop_at_eos: bool = True, timings: DecodeTimings | None = None,
                     config: GenerationConfig | None = None) -> list[list[int]]:
        """Greedy (or `config.num_beams` beam) decoding; with `stop_at_eos=False` every row is
        `max_new_tokens` long (EOS banned). Other settings of `config` are not CTranslate2's."""
        steps, num_beams = max_new_tokens or self.config.max_len, config.num_beams if config else 1
        tokens = [[self.vocab[i] for i in src] for src in sources]
        if stop_at_eos and timings is None:
            return self._run(tokens, steps, fixed=False, beams=num_beams)
        start = time.perf_counter()
        self._run(tokens, 1, beams=num_beams)
        first = time.perf_counter() - start
        start = time.perf_counter()
        rows = self._run(tokens, steps, beams=num_beams)
        total = time.perf_counter() - start
        if timings is not None:
            per_token = max(0.0, total - first) / max(1, steps - 1)
            timings.encoder_s = 0.0  # not separable in CTranslate2: counted in the first step
            timings.steps_s = [first] + [per_token] * (steps - 1)
        return rows
