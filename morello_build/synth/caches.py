"""Cache geometry in the cost model: stride classes (runs that map to the same cache sets), which views and
copies evict themselves, and which blocks may stay in L2. Refusals (synth/actions) and surcharges
(synth/cost.py, the kernels) ask these; they price nothing themselves."""

from __future__ import annotations

from math import ceil

from morello_build.ir.spec import TensorSpec


def runs_per_set(t: TensorSpec, cache_bytes: int, ways: int) -> int:
    """How many runs of a tile with a stride class share each set of a cache: all of them when the
    class is a multiple of the set period (cache_bytes / ways), else one per period/alias runs."""
    return ceil(t.runs() / max(1, cache_bytes // ways // t.alias))


def view_evicts(t: TensorSpec, target) -> bool:
    """Whether a cache view of ``t`` would evict itself: more of its runs than ways share an L1 set. At
    an unknown stride, assume the usual power-of-two one, where all runs may collide; a stride class
    says how many do (view_footprint charges the ways they take from the buffers around them)."""
    per_set = runs_per_set(t, target.l1_bytes, target.l1_ways) if t.alias else t.runs()
    return per_set > target.l1_ways


def view_footprint(t: TensorSpec, target) -> int:
    """L1 bytes a cache view takes from the other buffers. Runs of a stride class fill whole ways of
    the few sets they map to, so the view costs those ways in every set (runs per set x set period): six
    rows 4 KiB apart leave no room for a 32 KiB B panel beside them in a 48 KiB, 12-way L1."""
    if not t.alias:
        return t.bytes
    return max(t.bytes, runs_per_set(t, target.l1_bytes, target.l1_ways) * (target.l1_bytes // target.l1_ways))


def copy_live_runs(src: TensorSpec, dst: TensorSpec) -> int:
    """How many of its source's runs a packing copy reads side by side: its innermost loop walks the
    destination's innermost digit (codegen's ``_digit_nest``), which crosses the source's runs when the copy
    transposes, one element of each run per trip; 1 when it walks along them."""
    inner = [(d, e) for d, e in zip(dst.layout.digits, dst.layout.extents(dst.shape)) if e > 1]
    runs = [d for d, e in zip(src.layout.digits, src.layout.extents(src.shape)) if e > 1]
    if not inner or not runs or inner[-1][0].dim == runs[-1].dim:
        return 1
    return inner[-1][1]


def copy_thrashes(src: TensorSpec, dst: TensorSpec, target) -> bool:
    """Whether a transposing copy evicts its own source lines: the runs it reads side by side stay in L1
    only while they take at most half the ways of the sets they share (the destination buffer and the
    other operands need the rest, as in l2_evicts), else each line is fetched again for every element.
    A stride class says how many share one: 16 (or 8) columns of a bf16 N x K matrix with K = 2048 are
    4 KiB apart, all in one set (Zen 3, 8 ways, one thread: 4x2048x16384 ran 124 ms, 9x the GEMV)."""
    live = copy_live_runs(src, dst)
    if not src.alias or live <= target.l1_ways // 2:
        return False
    return ceil(live / max(1, target.l1_bytes // target.l1_ways // src.alias)) > target.l1_ways // 2


def l2_evicts(t: TensorSpec, target) -> bool:
    """A tile whose runs take more than half the ways of an L2 set (a stride class) does not stay in L2:
    the other operands need the rest."""
    return t.alias > 0 and runs_per_set(t, target.l2_bytes, target.l2_ways) > target.l2_ways // 2


def fits_l2(t: TensorSpec, target) -> bool:
    """Whether a block may be kept in L2. Specs carry no L2 limit: each L2 view is at most a quarter of L2,
    and an operand already in L2 is never viewed there again, so a matmul's three operands fit together
    (the search views only B there, beside an A block: 512 KiB at most)."""
    return t.bytes <= target.l2_block_bytes
