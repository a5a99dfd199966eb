"""dot_quant for the gated pair (C1 += A·B1; C2 += A·B2, B1 and B2 in one weight format): the columns of
both in one loop over K, each chunk of A loaded once for both (quant.py's groups, chains and scales; each
B's scale and zero-point arrays are its own, ``b1_scales`` and ``b2_scales``)."""

from __future__ import annotations

from math import ceil

from morello_build.ir.formats import is_format
from morello_build.ir.spec import Matmul
from morello_build.synth.cost import Features, lines_read, streams_read
from morello_build.target.kernels import quant
from morello_build.target.kernels.common import F32, KernelDef, check_dot_operands, pairwise_sum
from morello_build.target.kernels.dot import dot_shape


def _single(op, b) -> Matmul:
    """One of the pair's matmuls (A·B into C1's registers): what quant.py counts and checks."""
    return Matmul(op.a, b, op.c1, accum=True, serial=True)


def _applies(op, target):
    if op.kind != "pair" or not is_format(op.b1.dtype):
        return False
    fmt, k = op.b1.dtype, op.iter_shape[2]
    return (
        dot_shape(op, target, max(1, min(4, (target.vector_regs - 4) // 2)))
        and op.a.dtype == F32
        and op.a.unit_stride(2)
        and op.b2.dtype == fmt
        and k % fmt.group == 0
        and k % fmt.unit == 0
        and _vector_regs(op, target) <= target.vector_regs
    )


def _cost(op, target):
    """Both matmuls' counts, less the second's A loads and lines, with B1's and B2's columns read as
    2n interleaved streams (one column of each: two streams of separate operands)."""
    fmt, (_, _, k, n) = op.b1.dtype, op.iter_shape
    one, two = (quant._cost(_single(op, b), target, cols=2 * n) for b in (op.b1, op.b2))  # 2n: prefetch trips
    groups = k // fmt.group if fmt.group > 1 else 1
    a_loads = groups * ceil((k // groups) / target.lanes)
    shared = Features.of(vec_load=a_loads) + lines_read(op.a) + quant.zero_sum_features(fmt, k, target.lanes)
    own = one + two + shared * -1  # A's loads and lines, and its sums, once
    b_alone = streams_read(op.b1, n) * -2
    return own + b_alone + sum((streams_read(b, 2 * n, n == 1) for b in (op.b1, op.b2)), Features.of())


def _vector_regs(op, target) -> int:
    """quant.py's registers (quant._vector_regs) for 2n columns: chains, accumulators, temporaries."""
    fmt, (_, _, k, n) = op.b1.dtype, op.iter_shape
    return quant.vector_regs(fmt, 2 * n, k, target, quant.chains(fmt, 2 * n, k, target))


def _emit(lw, node, binds) -> None:
    a, b1, b2, c1, c2 = binds
    op = node.spec.op
    fmt, (_, _, k, n) = b1.dtype, op.iter_shape
    check_dot_operands(lw, "dot_quant_pair", a, (b1, b2), (c1, c2), 1, k, n)
    lw.open("{")
    lw.emit(f"// dot_quant_pair: {n} column(s) each of B1 and B2, {fmt} weights, K = {k}")
    ap = lw.fresh("ap")
    lw.emit(f"const float* {ap} = {lw.ptr(a, (0, 0, 0))};")
    bps, sps, zps = quant.column_pointers(lw, fmt, [(b, j) for b in (b1, b2) for j in range(n)])
    cols = 2 * n
    u = quant.chains(fmt, cols, k, lw.target)
    head, rolled = _prefetch_head(lw, op, bps)
    if fmt.group == 1:  # f16, e4m3: one "group" of K values, no scale
        parts = quant._zeroed(lw, [[lw.fresh("acc") for _ in range(u)] for _ in range(cols)])
        quant._group_chunks(lw, fmt, parts, ap, bps, [None] * cols, "0", k, head)
        accs = [pairwise_sum(lw, col) for col in parts]
    else:
        accs = [col[0] for col in quant._zeroed(lw, [[lw.fresh("acc")] for _ in range(cols)])]
        scales = quant.widened_column_scales(lw, fmt, k, bps, sps)
        quant._grouped(lw, fmt, accs, ap, bps, sps, zps, k, u, (head, rolled), scales=scales)
    outs = [(c, j) for c in (c1, c2) for j in range(n)]
    for (c, j), acc in zip(outs, accs):
        lw.emit(f"{lw.elem(c, (0, 0, j))} += {lw.v}::hsum({acc});")
    lw.close()


def _prefetch_head(lw, op, bps):
    """dot_quant's prefetches (quant._prefetches, for the 2n columns' chains) of the columns of B1 and of
    B2 that are streamed from main memory (bps: B1's n columns, then B2's)."""
    n = op.iter_shape[3]
    plans = [quant._prefetches(_single(op, b), lw.target, 2 * n) for b in (op.b1, op.b2)]
    plan = next((p for p in plans if p[0]), plans[0])  # B1's and B2's agree where both are prefetched
    return quant.prefetch_head(lw, plan, [bp for i, bp in enumerate(bps) if plans[i // n][0]])


DOT_QUANT_PAIR = KernelDef(
    name="dot_quant_pair",
    kind="pair",
    vector=True,
    applies=_applies,
    cost=_cost,
    emit=_emit,
    doc="dot_quant over the gated pair's B1 and B2 columns in one loop over K (A loaded once for both)",
    vector_regs=_vector_regs,
)
