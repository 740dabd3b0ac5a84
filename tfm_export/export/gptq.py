"""GPTQ rounding for `--int4-method gptq` (Frantar et al. 2022, "GPTQ: Accurate Post-Training Quantization").

Round to nearest (rtn) rounds every weight on its own. GPTQ rounds the input channels (rows of a MatMul's
B, K x N) one after another and spreads each row's rounding error over the rows not yet rounded, weighted by
H = 2/n * sum x x^T of the inputs x the MatMul reads on calibration data: what it minimises is the error of
the MatMul's *output* on those inputs, not of the weights. The result is an ordinary asymmetric 4-bit weight
in MatMulNBits' layout (a scale and a zero point per block of `block_size` rows and column), the same size
and kernel as rtn's.

Why not ONNX Runtime's own (`onnxruntime.quantization.neural_compressor.weight_only.gptq`, which
`MatMulNBitsQuantizer`'s GPTQ config calls): in 1.31 it reads the error weights from the wrong triangle of the
upper Cholesky factor of H^-1 (`Hinv1[i:, i]`, all zero below the diagonal), so no error is ever spread and it
returns rtn's weights (equal to 2e-7 on a random weight and Hessian: tests/test_gptq.py shows both).
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAXQ = 15  # 4-bit codes 0..15
DAMPING = 0.01  # of H's mean diagonal, added to it: the reference implementation's percdamp
LAZY_ROWS = 128  # rows rounded between two updates of the rows after them (the reference's blocksize)


def gptq_codes(weight: np.ndarray, hessian: np.ndarray, block_size: int) -> tuple[np.ndarray, ...]:
    """(codes uint8 (K, N), scales float32 (blocks, N), zero points uint8 (blocks, N)) of a float (K, N) weight.

    Each block's scale and zero point are its minimum and maximum (0 included, as rtn's) taken when the
    block's first row is reached, on the weights as the errors of the rows before have left them."""
    w = weight.astype(np.float64, copy=True)
    h = hessian.astype(np.float64, copy=True)
    k, n = w.shape
    dead = np.diag(h) == 0  # an input that is always 0: its row does not matter
    h[dead, dead] = 1
    w[dead, :] = 0
    h[np.arange(k), np.arange(k)] += DAMPING * np.mean(np.diag(h))
    upper = np.linalg.cholesky(np.linalg.inv(h)).T  # H^-1 = U^T U
    blocks = -(-k // block_size)
    codes = np.zeros((k, n), np.uint8)
    scales, zeros = np.zeros((blocks, n)), np.zeros((blocks, n))
    # Errors reach the rows of the current batch at once and the rows after it in one product per batch (the
    # reference implementation's lazy batch updates: the same result, one matrix product instead of a rank-1
    # update of every remaining row per row). A batch holds whole blocks, so a block's rows are up to date.
    batch = block_size * max(1, LAZY_ROWS // block_size)
    for start in range(0, k, batch):
        end = min(start + batch, k)
        errors = np.zeros((end - start, n))
        for i in range(start, end):
            b = i // block_size
            if i % block_size == 0:
                rows = w[i:i + block_size]
                low, high = np.minimum(rows.min(0), 0), np.maximum(rows.max(0), 0)
                scales[b] = np.where(high > low, (high - low) / MAXQ, 1.0)
                zeros[b] = np.round(-low / scales[b])
            code = np.clip(np.round(w[i] / scales[b]) + zeros[b], 0, MAXQ)
            codes[i] = code
            errors[i - start] = (w[i] - scales[b] * (code - zeros[b])) / upper[i, i]
            w[i + 1:end] -= np.outer(upper[i, i + 1:end], errors[i - start])  # the batch's rows still to round
        w[end:] -= upper[start:end, end:].T @ errors  # the rows after the batch, in one product
    return codes, scales.astype(np.float32), zeros.astype(np.uint8)


def pack_gptq(array: np.ndarray, block_size: int, hessian: np.ndarray) -> tuple[Any, Any, Any]:
    """MatMulNBits' (B_Q4 (N, blocks, block/2), scales (N, blocks), zero points (N, ceil(blocks/2))) of GPTQ's
    codes: two codes a byte, low nibble first; K padded to whole blocks with code 0 and the zero points of a
    row with 8, as ONNX Runtime packs rtn's (with H the identity the bytes are rtn's: tests/test_gptq.py)."""
    codes, scales, zeros = gptq_codes(array, hessian, block_size)
    k, n = codes.shape
    blocks = scales.shape[0]
    padded = np.zeros((blocks * block_size, n), np.uint8)
    padded[:k] = codes
    rows = padded.T.reshape(n * blocks, block_size)
    packed = (rows[:, 0::2] | rows[:, 1::2] << 4).reshape(n, blocks, block_size // 2)
    zeros = np.pad(zeros.T, ((0, 0), (0, blocks % 2)), constant_values=8)
    return packed, np.ascontiguousarray(scales.T), zeros[:, 0::2] | zeros[:, 1::2] << 4
