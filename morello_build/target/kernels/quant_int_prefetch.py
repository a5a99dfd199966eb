"""The prefetches of the dot kernels that read B's columns as one stream: the integer kernels (``dot_int``,
``dot_int4`` and their zmm forms: quant_int.py, quant_int4.py, quant_int_zmm.py, quant_int4_zmm.py; a step per
pair of blocks, or four for ``dot_int4_vnni512``) and, with several groups, the f32 ones
over weight formats (``dot_quant``, ``dot_quant_rows``, ``dot_quant_lut``; a step per group). Each kernel
prefetches into L2 the bytes of the n columns after its last one, a share per step, so that a loop over N
reads each of B's arrays (the values; separate scales and zero points) as one sequential stream, and deals
each step's share out between its columns' products."""

from __future__ import annotations

from math import ceil

from morello_build.ir.aquant import BLOCK
from morello_build.ir.formats import SCALE_DTYPES
from morello_build.ir.spec import Level
from morello_build.synth.cost import Features, lines_read

LINE = 64


def column_bytes(fmt, k: int) -> int:
    return ceil(k * fmt.bytes)


def prefetch_streams(fmt, k: int) -> tuple[int, ...]:
    """Bytes per column of each array a kernel reads B from, in _pointers' order: the values (ggml blocks:
    their scales included), then the scales and the zero points where the format keeps them apart."""
    groups = k // fmt.group if not fmt.block else 0
    sizes = {"scales": SCALE_DTYPES[fmt.scales][1] if fmt.scales else 0, "zeros": 1}
    extra = tuple(groups * sizes[suffix] for suffix, _ in fmt.extra_arrays())
    return (column_bytes(fmt, k),) + extra


def _stream_plan(fmt, k: int, n: int, steps: int) -> tuple[tuple[int, int], ...]:
    """(lines, lines prefetched per step) of each stream: the bytes of the n columns after a kernel's last
    column spread over its steps, so that a loop over N reads its columns as one stream per array."""
    lines = [-(-n * b // LINE) for b in prefetch_streams(fmt, k)]
    return tuple((x, -(-x // steps) if steps else 0) for x in lines)


def prefetch_plan(fmt, k: int, n: int, span: int = 2, steps: int | None = None) -> tuple[int, int]:
    """(steps, lines prefetched per step over all of B's arrays): _stream_plan's totals; steps default to
    the integer kernels' whole steps of ``span`` blocks (pairs unless said)."""
    steps = k // BLOCK // span if steps is None else steps
    return steps, sum(per for _, per in _stream_plan(fmt, k, n, steps))


def streams_by_group(b, k: int, target) -> bool:
    """Whether a dot kernel over B's columns in a weight format (dot_quant, dot_quant_lut) reads them as one
    stream, step_slots' prefetches a share per group: B in main memory, several groups, prefetching on; else
    it prefetches each column ``prefetch_bytes`` ahead of its loads (quant.prefetch_plan)."""
    fmt = b.dtype
    return fmt.group > 1 and k // fmt.group > 1 and b.level == Level.GL and bool(target.costs.prefetch_bytes)


def stream_reads(b, k: int, n: int, steps: int | None = None) -> Features:
    """B's n columns read as one stream (streams_by_group): their lines, and step_slots' prefetches over its
    ``steps`` (default: its groups; a load each)."""
    steps = steps or k // b.dtype.group
    return Features.of(vec_load=steps * prefetch_plan(b.dtype, k, n, steps=steps)[1]) + lines_read(b)


def kernels_ahead(b, k: int, n: int, target) -> int:
    """How many kernels' columns ahead step_slots prefetches: the next kernel's, or as many further as the
    stream needs to run ``stream_lead_bytes`` ahead of its loads (CostTable) where a kernel's columns are fewer
    bytes. One i8 column of 2048 values per kernel (per-channel scales, 1x2048x16384 from DRAM, one thread,
    Emerald Rapids): the next column, 2 KiB ahead, read at 0.81 of a read sweep, 4 KiB ahead at 1.00."""
    ahead = n * column_bytes(b.dtype, k)
    return max(1, -(-target.costs.stream_lead_bytes // ahead)) if ahead else 1


def prefetch_slots(lw, b, cols, k: int, n: int, blk: str, slots: int, span: int = 2) -> list[list[str]]:
    """The integer kernels' step_slots: a step per ``span`` blocks, a pair unless said (blk: its first block)."""
    return step_slots(lw, b, cols[-1], k, n, f"{blk} / {span}", k // BLOCK // span, slots)


def step_slots(lw, b, last, k: int, n: int, step: str, steps: int, slots: int, jumps=None) -> list[list[str]]:
    """Step ``step``'s (a C expression, 0..steps-1) share of the prefetches into L2 of the arrays after the
    kernel's last column (``last``: its pointers, _pointers' order, of B's binding ``b``; past the tile of a
    gated pair, the other B's next columns: ``jumps``, the bytes from the end of the columns to them, None for
    the kernel's, Lowerer.kernel_streams; without them, kernels_ahead's columns), dealt out evenly over ``slots`` points
    of the step's work (the kernels emit slot i after their i-th column's products): the statements of each
    slot. Into L2 (prefetcht1): they run a kernel's worth of columns (KiBs) ahead, and
    prefetches into L1 from DRAM hold the few L1 fill buffers that the demand loads need (a Golden Cove
    Xeon, 1x2048x16384 from DRAM, 1 thread: q8_0 0.68 of a read sweep with T0, 0.86-0.88 with T1, 0.50
    without; AMD before Zen 4 fills L1 on every hint). Dealt out between the loads (``prefetch_l2_here``
    keeps each where it is written), not in one burst at the pair's start: q4_0 0.79 -> 1.00 of the sweep,
    q8_0 0.91 -> 1.08-1.12 (same CPU and shape). Separate scale and zero-point arrays are streams of their
    own (i8 g32: 0.88 of the sweep without their prefetches); a stream shorter than the steps stops at its
    last line (the same line again)."""
    fmt, sizes = b.dtype, prefetch_streams(b.dtype, k)
    last = [p for p in last if p is not None]  # the integer kernels' columns: (values, scales, zeros), None if none
    if len(last) != len(sizes):  # every array's stream is prefetched (prefetch_plan's cost counts them all)
        raise lw.error(f"step_slots: {len(last)} pointers for {len(sizes)} arrays of {fmt.value}")
    jumps = (lw.stream_jumps(b) if jumps is None else jumps) or ()
    further = 0 if jumps else kernels_ahead(b, k, n, lw.target) - 1  # kernels skipped: contiguous columns only
    stmts = []
    for i, (ptr, col_bytes, (lines, per)) in enumerate(zip(last, sizes, _stream_plan(fmt, k, n, steps))):
        past = f"{col_bytes} + {jumps[i]}" if jumps else col_bytes * (1 + further * n)
        for u in range(per):
            line = f"{step} * {per} + {u}"
            if steps * per > lines:
                line = f"{line} < {lines} ? {line} : {lines - 1}"
            stmts.append(f"{lw.rt}::prefetch_l2_here({ptr}, {past} + ({line}) * {LINE});")
    out: list[list[str]] = [[] for _ in range(slots)]
    for i, stmt in enumerate(stmts):
        out[i * slots // len(stmts)].append(stmt)
    return out
