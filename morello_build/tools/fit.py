"""The calibration fit: cost-table constants from micro-benchmark measurements by non-negative least squares.

Each measurement is one unit of a micro-benchmark (one FMA, one line read from DRAM, one parallel round) and
says which cost features that unit counts (``ROWS``): its time in cycles should be the features' counts
times the constants. The fit minimizes the relative error over all rows with every constant >= 0
(Lawson-Hanson NNLS, ``nnls``); the per-line adjustments of several streams, which may be negative, are
measured differences instead (``STREAM_ROWS``); constants no row counts keep the base table's values.
"""

from __future__ import annotations

from dataclasses import dataclass

# measurement name -> (what one unit is, the cost features one unit counts)
ROWS: dict[str, tuple[str, dict[str, float]]] = {
    "fma_tp_256": ("one 256-bit FMA of 12 independent chains", {"vec_fma": 1}),
    "fma_lat_256": ("one 256-bit FMA of a dependent chain", {"fma_latency": 1}),
    # The quantized kernels' other port classes (synth/cost.py: alu, shuffle, imul): the built-in tables' prices are
    # estimates (target/microarch.py); Zen 3 issues adds and logic ops on 4 pipes, shifts and converts on 2.
    "alu_tp_256": ("one 256-bit add, and, shift or int->float convert (a mix), 12 chains", {"vec_op": 1}),
    "shuffle_tp_256": ("one 256-bit vpshufb of 12 independent chains", {"vec_shuffle": 1}),
    "imul_tp_256": ("one 256-bit vpmaddubsw of 12 independent chains", {"vec_imul": 1}),
    "l1_load": ("one 256-bit load from L1", {"vec_load": 1}),
    "l1_store": ("one 256-bit store to L1", {"vec_store": 1}),
    "l2_line": ("a 64-byte line streamed from L2", {"l2_line": 1, "vec_load": 2}),
    "dram_line": ("a line streamed from DRAM, one thread", {"gl_line": 1, "vec_load": 2}),
    "short_run": ("a 512-byte DRAM run on a new page", {"gl_line": 8, "gl_short_run": 1, "vec_load": 16}),
    "parallel_round": ("a parallel call of the headers' pool, back to back", {"parallel_setup": 1}),
    "copy_gather": ("one element of A copied into strips of evens and odds, in L1", {"copy_gather_elem": 1}),
}
# Measured but fitted per vector width (profiles' "widths"), not in the shared rows.
WIDTH_ROWS: dict[str, tuple[str, int, str]] = {
    "fma_tp_512": ("one 512-bit FMA of 12 independent chains", 64, "vec_fma"),
    "fma_lat_512": ("one 512-bit FMA of a dependent chain", 64, "fma_latency"),
    "l1_load_512": ("one 512-bit load from L1", 64, "vec_load"),
    "l1_store_512": ("one 512-bit store to L1", 64, "vec_store"),
}
CLOCK = "clock"  # ns per cycle: a chain of dependent integer adds
# Measured, not fitted: every thread reads its own part of a DRAM buffer at once; its time per line over the threads
# that read is CostTable.gl_line_shared, the machine's aggregate line time (on one thread it tells nothing: none).
# (Fitted as one more gl_line row before 2026-11-30, it pulled a 16-vCPU Emerald Rapids VM's gl_line from its 14.9
# cycles alone to 16.7, and left the model predicting 16x on 16 threads for GEMVs that ran 6-8x faster.)
SHARED_ROW = ("dram_line_all", "a line from DRAM per thread, all threads reading")
# Measured, not fitted: one task of FMAs alone, and a parallel call of the headers' pool with one such task per
# thread; the call's time less the task's and a parallel round's, over the task's, is CostTable.tail_percent (the
# slowest thread's lateness, in tasks). A 16-vCPU Emerald Rapids VM ran one of 16 such threads at half speed.
TAIL_ROWS = {"task_alone": "one task of FMAs alone", "tasks_all": "a parallel call of one such task per thread"}
# The per-line adjustments to gl_line of a line read as one of several streams (CostTable.gl_two_streams,
# gl_interleaved): each row is a bf16 dot loop over DRAM (as the kernels run it, 1 KiB of prefetch lead in all)
# reading 2 columns of separate matrices, or 4 adjacent columns, side by side, and the adjustment is its cycles a
# line less those of the same loop over one column (STREAM_REFERENCE): the loads and arithmetic a line are the
# same, so the difference is the streams'. Signed, so not fitted: a core may read two streams faster than one
# (Zen 3: 4.3 against 5.2 ns a line); at least -gl_line (a line is never free).
STREAM_ROWS: dict[str, tuple[str, str]] = {
    "two_streams_line": ("a DRAM line of a dot loop over 2 columns of separate matrices", "gl_two_streams"),
    "interleaved_line": ("a DRAM line of a dot loop over 4 adjacent columns of 4 KiB", "gl_interleaved"),
}
STREAM_REFERENCE = "prefetch_1024"
# Measured to choose CostTable.prefetch_bytes, not fitted: a bf16 dot product's loop over DRAM (as the dot
# kernels run it) prefetching its stream d bytes ahead (0: not at all).
PREFETCH_ROWS: dict[str, int] = {f"prefetch_{d}": d for d in (0, 256, 512, 1024, 2048)}
PREFETCH_UNIT = "a DRAM line of a bf16 dot product's loop"
MIN_PREFETCH_GAIN = 0.03  # a gain below the measurements' noise on a quiet host (spread ~1-2%) is none
# Measured to choose CostTable.stream_lead_bytes, not fitted: an i8 dot product's loop over DRAM (as dot_quant runs
# it) prefetching its stream into L2 d bytes ahead.
STREAM_LEAD_ROWS: dict[str, int] = {f"stream_lead_{d}": d for d in (2048, 4096, 8192)}
STREAM_LEAD_UNIT = "a DRAM line of an i8 dot product's loop"


def units() -> dict[str, str]:
    """What one unit of each measurement is (the clock's: one cycle)."""
    out = {m: unit for m, (unit, _) in ROWS.items()} | {m: row[0] for m, row in WIDTH_ROWS.items()} | dict([SHARED_ROW])
    out |= TAIL_ROWS
    out |= {m: unit for m, (unit, _) in STREAM_ROWS.items()} | dict.fromkeys(PREFETCH_ROWS, PREFETCH_UNIT)
    return out | dict.fromkeys(STREAM_LEAD_ROWS, STREAM_LEAD_UNIT)


@dataclass(frozen=True)
class Fit:
    costs: dict[str, float]  # the fitted constants (cycles)
    residuals: dict[str, float]  # per measurement: (model - measured) / measured


def nnls(a, b, tol: float = 1e-12):
    """Lawson-Hanson non-negative least squares: x >= 0 minimizing |a x - b|."""
    import numpy as np

    a, b = np.asarray(a, float), np.asarray(b, float)
    n = a.shape[1]
    passive, x = np.zeros(n, bool), np.zeros(n)
    for _ in range(3 * n + 10):
        w = a.T @ (b - a @ x)
        if passive.all() or np.max(np.where(passive, -np.inf, w)) <= tol:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, w)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > tol).all():
                break
            neg = passive & (z <= tol)
            alpha = np.min(x[neg] / (x[neg] - z[neg]))
            x = x + alpha * (z - x)
            passive &= x > tol
            x[~passive] = 0.0
        x = z
    return x


def prefetch_bytes(
    cycles: dict[str, float], spreads: dict[str, float] | None = None, base: int | None = None
) -> int | None:
    """The prefetch distance whose loop ran fastest, unless the measurements cannot tell that loop from the
    one at ``base`` (the base table's distance; then ``base``) or from not prefetching (then 0); None without
    the measurements. Two loops are told apart when their medians differ by more than MIN_PREFETCH_GAIN and
    more than either's spread (``spreads``: interquartile range over median, calibrate.spread): on a noisy host
    the fastest of five loops within their spread of each other is chance, and following it flipped the
    distance between calibrations (Zen 3 VM, 2026-11-29: 1024, 1024, 2048, 2048 and 0, the last two a minute
    apart), where 0 also turns off the kernels that need a lead (the rows kernels of several columns, the
    quantized ones' prefetch plans)."""
    return fastest_distance(PREFETCH_ROWS, cycles, spreads, base)


def stream_lead_bytes(
    cycles: dict[str, float], spreads: dict[str, float] | None = None, base: int | None = None
) -> int | None:
    """The lead whose loop (STREAM_LEAD_ROWS) ran fastest, unless the base table's is within the noise of it (then
    ``base``); None without the measurements."""
    return fastest_distance(STREAM_LEAD_ROWS, cycles, spreads, base)


def fastest_distance(rows: dict[str, int], cycles, spreads, base: int | None) -> int | None:
    """prefetch_bytes' choice among ``rows`` (measurement name -> distance): the base's distance, else 0 (none),
    where the measurements cannot tell either from the fastest; else the fastest."""
    if not all(cycles.get(m, 0) > 0 for m in rows):
        return None
    best = min(rows, key=lambda m: (cycles[m], rows[m]))
    tied = [d for m, d in rows.items() if not _told_apart(m, best, cycles, spreads or {})]
    return base if base in tied else 0 if 0 in tied else rows[best]


def _told_apart(a: str, b: str, cycles: dict[str, float], spreads: dict[str, float]) -> bool:
    """Whether the medians of measurements ``a`` and ``b`` differ beyond their noise (prefetch_bytes)."""
    noise = max(MIN_PREFETCH_GAIN, spreads.get(a, 0.0), spreads.get(b, 0.0))
    return abs(cycles[a] - cycles[b]) > noise * min(cycles[a], cycles[b])


def fit(cycles: dict[str, float], threads: int = 1) -> Fit:
    """The constants of the rows whose measurements (``cycles``: cycles per unit) are present: NNLS over ROWS,
    then the stream adjustments (STREAM_ROWS) as measured differences, where ``threads`` (the threads
    SHARED_ROW ran on) are several gl_line_shared, and the tail (TAIL_ROWS)."""
    import numpy as np

    names = [m for m in ROWS if m in cycles and cycles[m] > 0]
    features = sorted({f for m in names for f in ROWS[m][1]})
    a = np.array([[ROWS[m][1].get(f, 0.0) / cycles[m] for f in features] for m in names])  # relative error
    x = nnls(a, np.ones(len(names)))
    costs = {f: round(float(v), 4) for f, v in zip(features, x)}
    model = {m: sum(c * costs[f] for f, c in ROWS[m][1].items()) for m in names}
    residuals = {m: round((model[m] - cycles[m]) / cycles[m], 4) for m in names}
    derived = stream_adjustments(cycles, costs.get("gl_line")) | shared_line(cycles, threads) | tail(cycles, threads)
    return Fit(costs | derived, residuals)


def tail(cycles: dict[str, float], threads: int) -> dict[str, int]:
    """CostTable.tail_percent and tail_threads from TAIL_ROWS and the parallel round, where all three were measured
    (on ``threads`` threads, several); 0 under loops.TAIL_FLOOR, the measurement's noise."""
    from morello_build.synth.loops import TAIL_FLOOR

    alone, everyone, round_ = (cycles.get(m, 0) for m in ("task_alone", "tasks_all", "parallel_round"))
    if not (alone > 0 and everyone > 0 and round_ > 0):
        return {}
    late = (everyone - alone - round_) / alone
    return {"tail_percent": round(100 * late) if late >= TAIL_FLOOR else 0, "tail_threads": threads}


def shared_line(cycles: dict[str, float], threads: int) -> dict[str, float]:
    """CostTable.gl_line_shared from SHARED_ROW's measurement on ``threads`` threads, where it was taken on several."""
    measured = cycles.get(SHARED_ROW[0], 0)
    return {"gl_line_shared": round(measured / threads, 4)} if threads > 1 and measured > 0 else {}


def stream_adjustments(cycles: dict[str, float], gl_line: float | None) -> dict[str, float]:
    """STREAM_ROWS' adjustments, where their rows, the reference and a fitted gl_line are present."""
    ref = cycles.get(STREAM_REFERENCE, 0)
    if not ref > 0 or gl_line is None:
        return {}
    return {f: round(max(cycles[m] - ref, -gl_line), 4) for m, (_, f) in STREAM_ROWS.items() if cycles.get(m, 0) > 0}
