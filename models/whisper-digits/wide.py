"""`train.py --layout wide`: whisper-digits widened WIDEN times (d_model 128 -> 512) and deepened (2 -> 8 decoder
layers) so that a decoder step is a large model's (weights read from memory, not per-call overhead): issue #63's
"Whisper with a smaller draft" case, where the target's decoder dominates transcription. `--layout deep`: the
same at 16 decoder layers, so that the decoder's share of transcription is nearer large-v2's (32 + 32 layers over
30 s windows) than 2 + 8 layers over 4 s windows is (the encoder is 40 % of a 2 + 8 transcription on CPU).

Training such a model from scratch takes hours on 2 cores (an encoder step at d_model 512 costs ~16x the tiny
one's); instead it starts as the trained model itself, widened without changing its function (Net2Net's
replication): every d_model vector becomes WIDEN copies of itself, so a layer norm over 512 features sees the mean
and variance of the 128 it came from; a linear layer that reads the copies gets its weights tiled and divided by
WIDEN; heads keep their width (32), WIDEN times as many. The added decoder layers start as the identity (their
output projections zero) and train. The recipe then fine-tunes the decoder (the encoder frozen: its backward pass
is most of a step's cost) for MINUTES, so the added layers do work and the copies drift apart.
"""

from __future__ import annotations

import torch
import transformers

WIDEN = 4  # d_model 128 * 4 = 512, 16 heads of 32
LAYOUTS = {"wide": 8, "deep": 16}  # --layout -> decoder layers: 2 trained + the rest identity layers to start
# how each weight of a copy-reading layer is tiled: (rows repeat, columns repeat, divide by); a 1-d tensor repeats
_OUT, _IN = (WIDEN, 1, 1), (WIDEN, WIDEN, WIDEN)  # a layer that writes copies; one that reads and writes them
_PLAN = {"conv1.weight": _OUT, "conv2.weight": _IN, "embed_tokens.weight": (1, WIDEN, 1),
         "proj_out.weight": (1, WIDEN, 1), "embed_positions.weight": (1, WIDEN, 1)}


def _tiled(name: str, value: torch.Tensor) -> torch.Tensor:
    """`value` as the widened model's: copies in, copies out (see the module docstring)."""
    if value.dim() == 1:
        return value.repeat(WIDEN)
    rows, cols, div = next((plan for key, plan in _PLAN.items() if name.endswith(key)), _IN)
    return value.repeat(rows, cols, *([1] * (value.dim() - 2))) / div


def widen(model: transformers.WhisperForConditionalGeneration, layout: str = "wide"
          ) -> transformers.WhisperForConditionalGeneration:
    """`model` at WIDEN x its width and LAYOUTS[layout] decoder layers, computing what it computes."""
    decoder_layers = LAYOUTS[layout]
    config = transformers.WhisperConfig.from_dict(model.config.to_dict())
    config.d_model *= WIDEN
    config.encoder_ffn_dim, config.decoder_ffn_dim = config.encoder_ffn_dim * WIDEN, config.decoder_ffn_dim * WIDEN
    config.encoder_attention_heads *= WIDEN
    config.decoder_attention_heads *= WIDEN
    config.decoder_layers = decoder_layers
    torch.manual_seed(1234)
    wide = transformers.WhisperForConditionalGeneration(config)
    weights = wide.state_dict()
    for name, value in model.state_dict().items():
        weights[name] = _tiled(name, value)
    # the final norm's copies summed by the tied output layer: divided so the logits are the model's, not WIDEN x
    for part in ("weight", "bias"):
        weights[f"model.decoder.layer_norm.{part}"] = weights[f"model.decoder.layer_norm.{part}"] / WIDEN
    for layer in range(model.config.decoder_layers, decoder_layers):  # added layers: the identity to start with
        for proj in ("self_attn.out_proj", "encoder_attn.out_proj", "fc2"):
            for part in ("weight", "bias"):
                weights[f"model.decoder.layers.{layer}.{proj}.{part}"].zero_()
    wide.load_state_dict(weights, strict=True)
    wide.generation_config = transformers.GenerationConfig.from_dict(model.generation_config.to_dict())
    for param in wide.model.encoder.parameters():
        param.requires_grad_(False)
    return wide
