"""The L2 level: GotoBLAS's B panels. A k slice of an aliased B is copied once into a scratch set of panels
of W columns; kernels stream each panel from an L2 view (a relabel, no copy) while the loop over the rows of
A reuses it. Specs carry no L2 limit: each L2 view is at most an L2 block (cost.fits_l2).
"""

from __future__ import annotations

import re

import pytest

from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import MoveImpl, walk
from morello_build.ir.layout import packed, row_major
from morello_build.ir.spec import DType, Level, Matmul, MemoryLimits, Spec, TensorSpec
from morello_build.synth.cost import Features, lines_read, view_features
from morello_build.synth.search import Search
from morello_build.target import TARGETS

AVX512 = TARGETS["avx512"]


def _moves(impl):
    return (n for n in walk(impl) if isinstance(n, MoveImpl))


def _panel(k, n, level):
    layout = packed(2, 16)
    return TensorSpec((1, k, n), DType.F32, layout, level, len(layout.digits))


def test_kernels_stream_l2_lines_cheaper_than_main_memory_and_dearer_than_l1():
    c = AVX512.costs
    reads = [lines_read(_panel(256, 64, lv)) for lv in (Level.GL, Level.L2, Level.L1)]
    lines = _panel(256, 64, Level.GL).lines()
    assert reads == [Features.of(gl_line=lines), Features.of(l2_stream=lines), Features.of()]
    assert c.gl_line > c.l2_stream > 0
    assert view_features(_panel(64, 64, Level.L2)) == Features.of(l2_line=_panel(64, 64, Level.L2).lines())


def test_l2_leaves_the_spec_limits_alone():
    limits = MemoryLimits(4096, 64, 16)
    assert limits.minus(Level.L2, 1 << 20) == limits and limits.get(Level.L2) is None


def test_search_streams_b_panels_from_l2():
    """1024^3: B's rows are 4 KiB apart. The program packs each k slice of B once into panels (a GL
    scratch) and views panels of 256 KiB or less in L2, which the 6x64 kernels stream."""
    from morello_build.synth import schedule as S

    # schedule's memo of AVX512: the pinned programs below (and test_alias's, in the same worker) reuse it
    impl = S.synthesize("matmul 1024x1024x1024 serial", AVX512)
    moves = list(_moves(impl))
    panels = [m for m in moves if m.operand == 1 and m.buffer.level == Level.GL]
    assert panels and all(p.buffer.layout == packed(2, 16) and p.buffer.bytes <= AVX512.scratch_bytes for p in panels)
    views = [m for p in panels for m in _moves(p.body) if m.view and m.buffer.level == Level.L2]
    assert views and all(v.operand == 1 and v.buffer.bytes <= AVX512.l2_block_bytes for v in views)


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_l2_views_of_b_panels_compile_and_match_the_reference(isa, tmp_path):
    """Pinned: split k, pack B's slice into panels (padded where N is not a multiple of W), view a tile of
    panels in L2, search the rest; at awkward sizes, compiled and compared with the reference loop."""
    from morello_build.check.testing import check_headers
    from morello_build.codegen import emit_header
    from morello_build.synth import schedule as S

    t = TARGETS[isa]
    w = max(t.lanes, 1)
    kernels = []
    for i, (text, kc, nb) in enumerate((("matmul 37x300x70", 128, 2 * w), ("matmul 13x129x33 b=bf16", 64, w))):

        def panels(s):
            return S.move(
                s,
                "b",
                "GL",
                layout=S.packed(2, w),
                dtype="f32",
                target=t,
                body=lambda p: S.tile_out(
                    p, (p.op.c.shape[1], nb), target=t, body=lambda q: S.move(q, "b", "L2", target=t)
                ),
            )

        impl = S.split(text, kc, target=t, body=panels)
        assert [m for m in _moves(impl) if m.buffer.level == Level.L2 and m.view], "no L2 view in the program"
        kernels.append((text, emit_header(parse_spec(text), impl, t, name=f"k{i}", namespace="l2v"), "l2v", f"k{i}"))
    res = check_headers(kernels, tmp_path)
    assert res.ok, res.output


@pytest.mark.parametrize(
    "text, layout, why",
    [
        ("matmul 8x64x40", None, "an L2 view of 64 strided runs is not modelled"),  # rows of a wider B
        ("matmul 8x64x32", "row", "L2 holds views only"),
    ],
)
def test_schedule_explains_a_refused_l2_move(text, layout, why):
    from morello_build.synth import schedule as S

    t = AVX512
    with pytest.raises(ValueError, match=r"move b -> L2 does not apply .*" + re.escape(why)):
        S.tile_out(text, (8, 16), target=t, body=lambda s: S.move(s, "b", "L2", layout=layout, target=t))


def test_schedule_refuses_an_l2_view_larger_than_an_l2_block():
    from morello_build.synth import schedule as S

    t = AVX512
    with pytest.raises(ValueError, match=r"an L2 view holds at most 262144 bytes, this one 524288"):
        S.move("matmul 8x512x256", "b", "L2", target=t)


def test_memo_entries_for_l2_specs_are_feasible_under_smaller_l1_limits():
    """L2 views take nothing from the limits: a program found for a B panel in L2 under some L1 limit is
    rebuilt under any smaller limit above its peaks (the memo's rule), like any other."""
    t = AVX512
    op = Matmul(
        TensorSpec((1, 12, 256), DType.F32, row_major()),
        _panel(256, 64, Level.L2),
        TensorSpec((1, 12, 64), DType.F32, row_major()),
        accum=True,
        serial=True,
    )
    big = Search(t).best(Spec(op, t.limits()))
    small = Search(t).best(Spec(op, MemoryLimits(*big.peaks)))
    assert small is not None and round(small.cost, 6) == round(big.cost, 6)
