"""The microkernel catalog: each kernel is one record (``KernelDef``) holding what it implements, what it
needs of the target, what it costs and how it emits its C++.

Kernels are generic over the vector width: the ISA helper templates (templates/isa_*.hpp.j2) give every
vector ISA one vocabulary (``mv::fma``, ``mv::load_bf16`` ...), so an emitter is written once. Registers
hold f32 only (bf16 is widened on the way in and rounded on the way out). One module per family:
``outer`` (register-tile outer products), ``dot`` (dot-product loops), ``rows`` (dot products of
several rows of A sharing each B chunk), ``quant`` and ``quant_rows`` (the same over B in a weight
format, dequantized in registers), ``moves`` (loads, stores, packing
copies; ``epilogue``: the terms a store applies), ``gate`` (the gated pair's store), ``zero``. Adding a
kernel is adding one record to a family and to ``CATALOG``.
"""

from __future__ import annotations

from morello_build.target.kernels import (
    dot,
    gate,
    moves,
    outer,
    quant,
    quant_int,
    quant_int4,
    quant_int4_zmm,
    quant_int_cols,
    quant_int_cols8,
    quant_int_zmm,
    quant_lut,
    quant_pair,
    quant_rows,
    rows,
    zero,
)
from morello_build.target.kernels.common import (
    KernelDef,
    columns_unit_stride,
    interleaved_for,
    registers,
    single_run_dim,
)

# Order matters: the search tries kernels in this order and keeps the first of equal-cost programs.
CATALOG: tuple[KernelDef, ...] = (
    outer.MAC_SCALAR,
    outer.FMA_OUTER,
    dot.DOT_F32,
    dot.DOT_BF16_WIDEN,
    dot.DOT_BF16_DP,
    dot.DOT_F32_PAIR,
    dot.DOT_BF16_WIDEN_PAIR,
    dot.DOT_BF16_DP_PAIR,
    rows.DOT_F32_ROWS,
    rows.DOT_BF16_ROWS,
    rows.DOT_F32_ROWS_PAIR,
    rows.DOT_BF16_ROWS_PAIR,
    quant_lut.DOT_QUANT_LUT,
    quant.DOT_QUANT,
    quant_rows.DOT_QUANT_ROWS,
    quant_rows.DOT_QUANT_ROWS_PAIR,
    quant_pair.DOT_QUANT_PAIR,
    quant_int4.DOT_INT4_VNNI,
    quant_int4.DOT_INT4_AVXVNNI,
    quant_int4_zmm.DOT_INT4_VNNI512,
    quant_int4.DOT_INT4,
    quant_int_cols.DOT_INT_COLS16,
    quant_int_cols8.DOT_INT_COLS8_AVXVNNI,
    quant_int_cols8.DOT_INT_COLS8,
    quant_int_zmm.DOT_INT_VNNI512,
    quant_int.DOT_INT_VNNI,
    quant_int.DOT_INT_AVXVNNI,
    quant_int.DOT_INT,
    quant_int.DOT_INT_SCALAR,
    moves.VLOAD,
    moves.VSTORE,
    moves.SCALAR_LOAD,
    moves.SCALAR_STORE,
    moves.COPY,
    quant_int.QUANTIZE_A,
    gate.VGATE,
    gate.SGATE,
    zero.VZERO,
    zero.SZERO,
    zero.MEMZERO,
)
BY_NAME = {k.name: k for k in CATALOG}

__all__ = ["BY_NAME", "CATALOG", "KernelDef", "columns_unit_stride", "interleaved_for", "registers", "single_run_dim"]
