"""The integer dot kernels' prefetches (``dot_int``, ``dot_int4``, ``dot_int4_vnni512``: quant_int.py,
quant_int4.py, quant_int4_zmm.py): each kernel prefetches into L2 the bytes of the n columns after its last
one, a share per pair of blocks (per step of four: dot_int4_vnni512), so that a loop
over N reads each of B's arrays (the values; separate scales and zero points) as one sequential stream, and
deals each pair's share out between its columns' products."""

from __future__ import annotations

from morello_build.ir.aquant import BLOCK
from morello_build.ir.formats import SCALE_DTYPES

LINE = 64


def column_bytes(fmt, k: int) -> int:
    return k // BLOCK * (fmt.unit_size if fmt.block else fmt.bits * BLOCK // 8)


def prefetch_streams(fmt, k: int) -> tuple[int, ...]:
    """Bytes per column of each array a kernel reads B from, in _pointers' order: the values (ggml blocks:
    their scales included), then the scales and the zero points where the format keeps them apart."""
    groups = k // fmt.group if not fmt.block else 0
    sizes = {"scales": SCALE_DTYPES[fmt.scales][1] if fmt.scales else 0, "zeros": 1}
    extra = tuple(groups * sizes[suffix] for suffix, _ in fmt.extra_arrays())
    return (column_bytes(fmt, k),) + extra


def _stream_plan(fmt, k: int, n: int, span: int = 2) -> tuple[int, tuple[tuple[int, int], ...]]:
    """(steps of ``span`` blocks (pairs), (lines, lines prefetched per step) of each stream): the bytes of the n
    columns after a kernel's last column spread over its steps, so that a loop over N reads its columns as one
    stream per array."""
    pairs = k // BLOCK // span
    lines = [-(-n * b // LINE) for b in prefetch_streams(fmt, k)]
    return pairs, tuple((x, -(-x // pairs) if pairs else 0) for x in lines)


def prefetch_plan(fmt, k: int, n: int, span: int = 2) -> tuple[int, int]:
    """(steps of ``span`` blocks, lines prefetched per step over all of B's arrays): _stream_plan's totals."""
    pairs, streams = _stream_plan(fmt, k, n, span)
    return pairs, sum(per for _, per in streams)


def prefetch_slots(lw, fmt, cols, k: int, n: int, blk: str, slots: int, span: int = 2) -> list[list[str]]:
    """This step's share of the prefetches (a step: ``span`` blocks, a pair unless said; blk: its first block)
    into L2, dealt out evenly over ``slots`` points of the step's work (the kernels emit slot i after their
    i-th column's products): the statements of each slot. Into L2 (prefetcht1): they run a kernel's worth of
    columns (KiBs) ahead, and prefetches into L1 from DRAM hold the few L1 fill buffers that the demand loads
    need (a Golden Cove Xeon, 1x2048x16384 from DRAM, 1 thread: q8_0 0.68 of a read sweep with T0, 0.86-0.88 with
    T1, 0.50 without; AMD before Zen 4 fills L1 on every hint). Dealt out between the loads (``prefetch_l2_here``
    keeps each where it is written), not in one burst at the pair's start: q4_0 0.79 -> 1.00 of the sweep,
    q8_0 0.91 -> 1.08-1.12 (same CPU and shape). Separate scale and zero-point arrays are streams of their
    own (i8 g32: 0.88 of the sweep without their prefetches); a stream shorter than the pairs stops at its
    last line (the same line again)."""
    pairs, streams = _stream_plan(fmt, k, n, span)
    stmts = []
    for ptr, col_bytes, (lines, per) in zip(cols[-1], prefetch_streams(fmt, k), streams):
        for u in range(per):
            line = f"{blk} / {span} * {per} + {u}"
            if pairs * per > lines:
                line = f"{line} < {lines} ? {line} : {lines - 1}"
            stmts.append(f"{lw.rt}::prefetch_l2_here({ptr}, {col_bytes} + ({line}) * {LINE});")
    out: list[list[str]] = [[] for _ in range(slots)]
    for i, stmt in enumerate(stmts):
        out[i * slots // len(stmts)].append(stmt)
    return out
