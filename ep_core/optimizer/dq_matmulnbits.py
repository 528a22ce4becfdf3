"""DequantizeLinear of constant 4- or 8-bit weights -> MatMul (or a plain Gemm): com.microsoft
MatMulNBits, as onnxruntime 1.31's QDQ transformer makes it at ORT_ENABLE_EXTENDED
(DQMatMulToMatMulNBits: DQMatMulNodeGroupSelector, ValidateDQForMatMulNBits in qdq_selectors.cc).

The fused op computes at the session's ``session.qdq_matmulnbits_accuracy_level`` (onnxruntime's
default 4: A quantized to int8 per block of K, an integer product per block), so a weight-only
quantized model gives onnxruntime's numbers, not the exact float product of the unfused graph (0.5
to 1.4% apart on int4 transformer exports). Selection, as onnxruntime's:

- the MatMul's B is the DQ's output and its A is not (one DQ; a Gemm may have a DQ bias too), no Q
  after it; a Gemm has alpha 1, no transposes, and beta 1 with a bias of shape [N];
- the DQ's weight is a constant [K, N] int4/uint4/int8/uint8 initializer with float or float16
  scales (onnxruntime computes float16 in float32 between Casts; so does the reference kernel) (and
  constant zero points of its type): blocked along K (axis 0, a block size of 16 or more, a power
  of 2), per channel (axis 1, [N] scales) or per tensor (a scalar scale); the latter two take
  ``session.qdq_matmulnbits_block_size`` (default 32) for their blocks;
- as onnxruntime 1.31 does in practice (measured): the DQ's output feeds that MatMul alone, and its
  weight, scales and zero points are its own (two DQs sharing a scale stay unfused there).

The weights are stored as MatMulNBits holds them: N
rows of K unsigned values (a signed weight and its zero point shifted by 2^(bits-1), the same
differences), low bits first, with explicit zero points."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from ep_core.optimizer.own_rules import constant

MS = "com.microsoft"
_BITS = {ir.DataType.INT4: 4, ir.DataType.UINT4: 4, ir.DataType.INT8: 8, ir.DataType.UINT8: 8}
_SIGNED = (ir.DataType.INT4, ir.DataType.INT8)


class _ToMatMulNBits(pattern.RewriteRuleClassBase):
    def __init__(self, op_type: str, accuracy: int, block_size: int) -> None:
        super().__init__(f"DQ{op_type}ToMatMulNBits", remove_nodes=False)
        self.op_type, self.accuracy, self.block_size = op_type, accuracy, block_size

    def pattern(self, op: Any, a: Any, w: Any, scale: Any) -> Any:
        b = op.DequantizeLinear(w, scale, _allow_other_inputs=True, _outputs=["dq_out"])
        return getattr(op, self.op_type)(a, b, _allow_other_inputs=True, _outputs=["mm_out"])

    def check(self, context: Any, a: Any, w: Any, scale: Any, dq_out: Any, mm_out: Any, **_: Any) -> Any:  # type: ignore[override]
        result = pattern.MatchResult()
        dq, mm = dq_out.producer(), mm_out.producer()
        if a.producer() is not None and a.producer().op_type == "DequantizeLinear":
            return result.fail("A comes from a DequantizeLinear too (MatMulIntegerToFloat's case)")
        if (
            dq_out.is_graph_output()
            or len(dq_out.uses()) != 1
            or any(n.op_type == "QuantizeLinear" for n, _ in mm_out.uses())
        ):
            return result.fail("the DQ output is a graph output or read elsewhere, or a Q follows")
        if any(v is not None and len(v.uses()) != 1 for v in dq.inputs):
            return result.fail("the DQ's weight, scales or zero points are shared (onnxruntime fuses only its own)")
        if self._layout(dq, w, scale) is None:
            return result.fail("the weight is not a constant 4/8-bit [K, N] with float scales, blocked or per channel")
        if self.op_type == "Gemm" and not self._plain_gemm(mm, w):
            return result.fail("the Gemm is not a MatMul plus a [N] bias")
        return result

    def _layout(self, dq: ir.Node, w: Any, scale: Any) -> tuple[int, int] | None:
        """(bits, block size) when the DQ is one MatMulNBits takes, else None."""
        wv, sv = constant(w), constant(scale)
        zp = dq.inputs[2] if len(dq.inputs) > 2 else None
        zv = constant(zp) if zp is not None else None
        if wv is None or sv is None or (zp is not None and zv is None) or w.dtype not in _BITS or wv.ndim != 2:
            return None
        if scale.dtype not in (ir.DataType.FLOAT, ir.DataType.FLOAT16):
            return None
        k, n = wv.shape
        block = dq.attributes.get_int("block_size", 0)
        axis = dq.attributes.get_int("axis", 1)
        if block > 0:
            ok = axis == 0 and block >= 16 and block & (block - 1) == 0 and sv.shape == ((k + block - 1) // block, n)
            return (_BITS[w.dtype], block) if ok and (zv is None or zv.shape == sv.shape) else None
        if sv.ndim == 0 and (zv is None or zv.ndim == 0):
            return _BITS[w.dtype], self.block_size
        if sv.shape == (n,) and axis == 1 and (zv is None or zv.shape == (n,)):
            return _BITS[w.dtype], self.block_size
        return None

    @staticmethod
    def _plain_gemm(gemm: ir.Node, w: Any) -> bool:
        a = gemm.attributes
        if a.get_float("alpha", 1.0) != 1.0 or a.get_int("transA", 0) != 0 or a.get_int("transB", 0) != 0:
            return False
        bias = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        if bias is None:
            return True
        n = w.shape[1] if w.shape is not None else None
        return a.get_float("beta", 1.0) == 1.0 and bias.shape is not None and list(bias.shape) == [n]

    def rewrite(self, op: Any, a: Any, w: Any, scale: Any, dq_out: Any, mm_out: Any, **_: Any) -> Any:
        dq, mm = dq_out.producer(), mm_out.producer()
        layout = self._layout(dq, w, scale)
        assert layout is not None
        bits, block = layout
        zp = dq.inputs[2] if len(dq.inputs) > 2 else None
        packed, scales, zeros = _pack(
            constant(w), constant(scale), constant(zp) if zp is not None else None, w.dtype, bits, block
        )
        k, n = constant(w).shape  # type: ignore[union-attr]
        name = mm_out.name  # the new initializers are named after the MatMul they serve
        inputs = [
            a,
            op.initializer(ir.tensor(packed), name=f"{name}_nbits"),
            op.initializer(ir.tensor(scales), name=f"{name}_nbits_scales"),
            op.initializer(ir.tensor(zeros), name=f"{name}_nbits_zero_points"),
        ]
        bias = mm.inputs[2] if self.op_type == "Gemm" and len(mm.inputs) > 2 else None
        if bias is not None:
            inputs += [None, bias]
        return op.MatMulNBits(*inputs, K=k, N=n, bits=bits, block_size=block, accuracy_level=self.accuracy, _domain=MS)


def _pack(
    w: Any, s: Any, z: Any, wtype: ir.DataType, bits: int, block: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """MatMulNBits' B [N, blocks, block * bits / 8], scales [N * blocks], zero points (uint8,
    4-bit ones two to a byte per row) from a DQ's [K, N] weight and its scales/zero points."""
    k, n = w.shape
    blocks = (k + block - 1) // block
    shift = 1 << (bits - 1) if wtype in _SIGNED else 0
    wu = (w.astype(np.int16) + shift).astype(np.uint8).T  # [N, K], unsigned
    zu = np.full(s.shape, shift, np.uint8) if z is None else (z.astype(np.int16) + shift).astype(np.uint8)
    if s.ndim < 2:  # per tensor or per channel: the same scale for every block of a column
        s, zu = np.broadcast_to(s, (blocks, n)), np.broadcast_to(zu, (blocks, n))
    padded = np.zeros((n, blocks * block), np.uint8)
    padded[:, :k] = wu
    padded[:, k:] = zu.T[:, -1:]  # the pad holds the zero point: it adds nothing
    zt = np.ascontiguousarray(zu.T)  # [N, blocks]
    if bits == 4:
        packed = padded[:, 0::2] | (padded[:, 1::2] << 4)
        if blocks % 2:
            zt = np.concatenate([zt, np.zeros((n, 1), np.uint8)], axis=1)
        zt = zt[:, 0::2] | (zt[:, 1::2] << 4)
    else:
        packed = padded
    packed = np.ascontiguousarray(packed.reshape(n, blocks, block * bits // 8))
    return packed, np.ascontiguousarray(np.asarray(s).T).reshape(-1), np.ascontiguousarray(zt).reshape(-1)


@functools.cache
def matmulnbits_rules(accuracy: int, block_size: int) -> list[Any]:
    """The rules for a session's accuracy level and per-channel block size."""
    return [_ToMatMulNBits.rule(op, accuracy, block_size) for op in ("MatMul", "Gemm")]
