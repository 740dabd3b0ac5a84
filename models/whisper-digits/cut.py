"""`train.py MINUTES --draft`: the folder's model cut to some of its layers (DRAFT_LAYERS), the start of draft/,
a speculative decoding assistant of the same tokenizer. Kept layers keep their weights, so minutes of training
make a useful draft of it, where a fresh model would need the teacher's hour.
"""

from __future__ import annotations

import transformers

DRAFT_LAYERS = {"encoder": (0, 1), "decoder": (0,)}  # the folder's layers the draft keeps, in order


def build_draft(teacher: transformers.WhisperForConditionalGeneration) -> transformers.WhisperForConditionalGeneration:
    """`teacher` cut to DRAFT_LAYERS: its embeddings, convolutions, norms and the kept layers' weights (a
    start that minutes of training make a useful draft of; a fresh one would need the teacher's hour)."""
    config = transformers.WhisperConfig.from_dict(teacher.config.to_dict())
    config.encoder_layers, config.decoder_layers = (len(DRAFT_LAYERS[side]) for side in ("encoder", "decoder"))
    draft = transformers.WhisperForConditionalGeneration(config)
    renamed = {f"model.{side}.layers.{old}.": f"model.{side}.layers.{new}."
               for side, kept in DRAFT_LAYERS.items() for new, old in enumerate(kept)}
    weights = {}
    for name, value in teacher.state_dict().items():
        prefix = next((p for p in renamed if name.startswith(p)), None)
        if prefix is not None or ".layers." not in name:
            weights[renamed[prefix] + name[len(prefix):] if prefix else name] = value
    draft.load_state_dict(weights, strict=True)
    draft.generation_config = transformers.GenerationConfig.from_dict(teacher.generation_config.to_dict())
    last = config.decoder_layers - 1  # the cross-attention heads token timestamps read: the last layer's
    draft.generation_config.alignment_heads = [[last, head] for _, head in teacher.generation_config.alignment_heads]
    return draft
