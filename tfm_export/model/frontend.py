"""What the encoder reads, per config.source: token ids through Embeddings (model.layers), Whisper's
log-mel features through two convolutions, or variable-length frames through one Linear. Each gives the
encoder's input (batch, src_len, d_model) and src_mask (batch, src_len), True where a source position is real."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from ..config import TransformerConfig
from .layers import Activation, Embeddings, gelu, position_table


class FeatureFrontEnd(nn.Module):
    """Whisper's encoder input: gelu(conv1(x)), gelu(conv2(.)) (stride 2: n_frames -> n_frames // 2
    positions), plus the encoder's position table; names as WhisperEncoder's (conv1, conv2)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        d = config.d_model
        self.conv1 = nn.Conv1d(config.n_mels, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.act = Activation(gelu)  # the exact GELU whatever config.activation says (WhisperEncoder's)
        self.positions, table = position_table(config.encoder_positions or config.positions, config.src_len, d)
        self.register_buffer("table", table, persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, features: Tensor) -> Tensor:
        """(batch, n_mels, n_frames) float -> (batch, src_len, d_model), src_len = n_frames // 2."""
        x = self.act(self.conv2(self.act(self.conv1(features))))  # (batch, d_model, src_len)
        x = x.transpose(1, 2)  # (batch, src_len, d_model)
        table = self.positions.weight if self.positions is not None else self.table
        if table is not None:  # (src_len, d_model): every source is the whole fixed window
            x = x + table
        return self.dropout(x)


class FrameFrontEnd(Embeddings):
    """Frames (batch, src_len, n_feats) -> Linear(n_feats, d_model) (in the token table's place, `tokens`),
    scaled and plus positions as token embeddings are. A padded frame is all NaN (config.source "frames"):
    it is zeroed first, as NaN times a weight would reach every position through attention."""

    def __init__(self, config: TransformerConfig):
        super().__init__(config, config.src_vocab_size, tokens=nn.Linear(config.n_feats, config.d_model),
                         positions=config.encoder_positions)

    def forward(self, frames: Tensor, offset: Tensor | int = 0) -> Tensor:
        real = torch.where(torch.isnan(frames), torch.zeros_like(frames), frames)  # (batch, src_len, n_feats)
        return super().forward(real, offset)


def token_source(config: TransformerConfig) -> nn.Module:
    return Embeddings(config, config.src_vocab_size, positions=config.encoder_positions)


def token_mask(config: TransformerConfig, source: Tensor, x: Tensor) -> Tensor:
    return source != config.src_pad_id  # (batch, src_len): pads are masked out


def feature_mask(config: TransformerConfig, source: Tensor, x: Tensor) -> Tensor:
    # Whisper has no source padding: every window is n_frames long (short audio is padded with silence,
    # which the model attends to, as it was trained), so every encoder position is real.
    return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)  # (batch, src_len)


def frame_mask(config: TransformerConfig, source: Tensor, x: Tensor) -> Tensor:
    # Padding is NaN, as token sources' is src_pad_id: one input carries the lengths. The first value decides
    # (the runtime pads whole frames; a NaN inside a real frame is refused before it gets here).
    return ~torch.isnan(source[..., 0])  # (batch, src_len)


# config.source -> (the module that embeds the source, its src_mask)
SOURCE_MODULES: dict[str, Callable[[TransformerConfig], nn.Module]] = {
    "tokens": token_source, "features": FeatureFrontEnd, "frames": FrameFrontEnd}
SOURCE_MASKS: dict[str, Callable[[TransformerConfig, Tensor, Tensor], Tensor]] = {
    "tokens": token_mask, "features": feature_mask, "frames": frame_mask}
