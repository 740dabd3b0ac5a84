"""ONNX Runtime contrib operators the exporter writes: how model.row_attention becomes one
`com.microsoft.GroupQueryAttention` node (decoder_rows.onnx).

onnxscript builds a node only from a registered operator schema, and ONNX ships none for ONNX
Runtime's own domain, so the subset of GroupQueryAttention's schema used here (no rotary, no local
window; inputs and attributes as ONNX Runtime documents them) is registered once, on first export.

Why GroupQueryAttention (with kv_num_heads == num_heads, plain multi-head attention): it is the one
fused CPU kernel that takes a per-row past length (`seqlens_k`) and, when present and past share
memory, writes the new key/value into the cache in place. `seqlens_k` is the number of filled slots
(cache_len) and `total_sequence_length` the cache's slots. ONNX Runtime range-checks `seqlens_k`
against the cache (ORT 1.31: "seqlens_k[0] = 4 is out of range [0, 4)"), so a full row is an error,
never a write past the buffer.
"""

from __future__ import annotations

from typing import Any

import onnx
import torch

DOMAIN, VERSION = "com.microsoft", 1


def _register_schema() -> None:
    if onnx.defs.has("GroupQueryAttention", DOMAIN):
        return
    schema, param = onnx.defs.OpSchema, onnx.defs.OpSchema.FormalParameter
    attr = schema.AttrType
    onnx.defs.register_schema(schema(
        "GroupQueryAttention", DOMAIN, VERSION, doc="ONNX Runtime contrib op (the inputs tfm-export writes)",
        inputs=[param("query", "T"), param("key", "T"), param("value", "T"), param("past_key", "T"),
                param("past_value", "T"), param("seqlens_k", "M"), param("total_sequence_length", "M")],
        outputs=[param("output", "T"), param("present_key", "T"), param("present_value", "T")],
        type_constraints=[("T", ["tensor(float)", "tensor(float16)"], "activations"),
                          ("M", ["tensor(int32)"], "lengths")],
        attributes=[schema.Attribute("num_heads", attr.INT, "query heads"),
                    schema.Attribute("kv_num_heads", attr.INT, "key/value heads"),
                    schema.Attribute("scale", attr.FLOAT, "score scale")]))


def _row_attention(q: Any, k: Any, v: Any, past_k: Any, past_v: Any, cache_len: Any, heads: int,
                   scale: float) -> Any:
    """model.row_attention as ONNX: Cast the lengths to int32, then GroupQueryAttention."""
    from onnxscript import opset18 as op
    from onnxscript.values import Opset

    seqlens = op.Cast(cache_len, to=onnx.TensorProto.INT32)  # (batch,): filled slots per row
    slots = op.Cast(op.Squeeze(op.Shape(past_k, start=2, end=3)), to=onnx.TensorProto.INT32)  # (): a constant
    return Opset(DOMAIN, VERSION).GroupQueryAttention(q, k, v, past_k, past_v, seqlens, slots, num_heads=heads,
                                                      kv_num_heads=heads, scale=scale)


def custom_translations() -> dict[Any, Any]:
    """torch.onnx.export's custom_translation_table for the model's custom operators (registered with
    torch when model.kv_cache imports model.row_attention)."""
    _register_schema()
    return {torch.ops.tfm_export.row_attention.default: _row_attention}
