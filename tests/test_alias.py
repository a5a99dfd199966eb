"""Stride classes: rows of a user's tensor that lie a multiple of 4 KiB apart share cache sets. Specs carry
the class (TensorSpec.alias); the cost model charges a cache view of such rows the L1 ways it takes and
gives no L2 reuse to blocks that cannot stay in L2; the search packs such an A into a dense scratch block
(GotoBLAS's A block).
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import MoveImpl, walk
from morello_build.ir.spec import ALIAS_MAX, Level, Matmul, MemoryLimits, Move, Spec, alias_stride, canonicalize
from morello_build.synth.cost import (
    l2_evicts,
    l2_reuse_lines,
    view_evicts,
    view_footprint,
)
from morello_build.target import TARGETS

AVX512 = TARGETS["avx512"]


def _spec(text, target=AVX512):
    return parse_spec(text).to_spec(target.limits())


def _synthesize(text):
    """The best program on AVX512 through schedule's memo of that target, which the pinned programs below
    share: these searches have most sub-specs in common (256^3 searches 4x faster after 512x1024x512)."""
    from morello_build.synth import schedule as S

    return S.synthesize(text, AVX512)


def _moves(impl):
    return (n for n in walk(impl) if isinstance(n, MoveImpl))


def test_stride_class_is_the_power_of_two_in_the_row_stride():
    assert [alias_stride(b) for b in (1024, 2048, 4096, 6000, 8192, 12288, 3 << 20, 1 << 30)] == [
        0,
        0,
        4096,
        0,
        8192,
        4096,
        1 << 20,
        ALIAS_MAX,
    ]


def test_to_spec_sets_stride_classes_of_multi_row_operands():
    op = _spec("matmul 64x1024x2048").op
    assert (op.a.alias, op.b.alias, op.c.alias) == (4096, 8192, 8192)
    assert {t.alias for t in _spec("matmul 256x256x256").op.operands} == {0}
    flagship = _spec("matmul 1x2048x16384 b=bf16:col").op  # B: 16384 rows of 2048 bf16
    assert (flagship.a.alias, flagship.b.alias, flagship.c.alias) == (0, 4096, 0)


def test_canonical_form_keeps_the_class_only_where_it_decides():
    a, b, c = _spec("matmul 64x1024x2048").op.operands
    assert a.tile((1, 6, 128)).canonical().alias == 4096  # several rows in main memory
    assert a.tile((1, 1, 128)).canonical().alias == 0  # one row has no stride
    assert dataclasses.replace(a.tile((1, 6, 128)), level=Level.L1).canonical().alias == 0  # a view
    limits = MemoryLimits(48 * 1024, 2048, 64)
    # Moves never look at it; outputs only through L2 reuse, which needs more than 8 rows.
    move = canonicalize(Spec(Move(a.tile((1, 64, 64)), dataclasses.replace(a.tile((1, 64, 64)), alias=0)), limits))
    assert move.op.src.alias == 0
    small = canonicalize(Spec(Matmul(a.tile((1, 8, 16)), b.tile((1, 16, 32)), c.tile((1, 8, 32))), limits))
    big = canonicalize(Spec(Matmul(a.tile((1, 16, 16)), b.tile((1, 16, 32)), c.tile((1, 16, 32))), limits))
    assert (small.op.a.alias, small.op.c.alias, big.op.c.alias) == (4096, 0, 8192)


def test_views_of_aliased_rows_take_whole_ways():
    """Six rows 4 KiB apart fill six ways of the same L1 sets: the view takes 24 KiB from the buffers
    beside it (a 32 KiB B panel no longer fits), where rows 1 KiB apart take their own 3 KiB."""
    from morello_build.synth.actions import MoveOperand, Plan

    t = AVX512
    aliased = _spec("matmul 64x1024x64").op.a.tile((1, 6, 128)).canonical()
    benign = _spec("matmul 64x256x64").op.a.tile((1, 6, 128)).canonical()
    assert view_footprint(aliased, t) == 6 * 4096 and view_footprint(benign, t) == 6 * 128 * 4
    assert not view_evicts(aliased, t) and view_evicts(_spec("matmul 64x1024x64").op.a.tile((1, 13, 8)), t)
    b = _spec("matmul 6x128x64").op.b.canonical()
    c = _spec("matmul 6x128x64").op.c.canonical()
    limits = dataclasses.replace(t.limits(), l1=t.l1_bytes - 32 * 1024)  # a B panel is in L1
    view = MoveOperand(0, Level.L1)
    assert isinstance(view.plan(Spec(Matmul(benign, b, c), limits), t), Plan)
    assert view.plan(Spec(Matmul(aliased, b, c), limits), t).code == "no-memory"
    assert isinstance(view.plan(Spec(Matmul(aliased, b, c), t.limits()), t), Plan)


def test_no_l2_reuse_credit_for_a_block_whose_rows_share_sets():
    t = AVX512
    spec = _spec("matmul 512x1024x256 accum")
    block = spec.op.a.tile((1, 512, 128))
    assert l2_evicts(block, t) and not l2_evicts(spec.op.a.tile((1, 64, 128)), t)
    body = canonicalize(
        Spec(Matmul(block, spec.op.b.tile((1, 128, 64)), spec.op.c.tile((1, 512, 64)), True, True), spec.limits)
    )
    dense = canonicalize(Spec(dataclasses.replace(body.op, a=dataclasses.replace(body.op.a, alias=0)), spec.limits))
    assert l2_reuse_lines(body, (3,), 4, t) == (0, 0) and l2_reuse_lines(dense, (3,), 4, t)[0] > 0  # A: no streams


def test_search_packs_an_aliased_a_block():
    """512x1024x512: A's rows are 4 KiB apart, so the program copies A blocks of 256 rows (128 KiB) into
    scratch in main memory and views 6-row micro-panels of the copy (whose rows are 512 B apart).
    Compiled programs with scratch blocks are checked below and in cpp_tests."""
    impl = _synthesize("matmul 512x1024x512 serial")
    scratch = [m for m in _moves(impl) if m.buffer.level == Level.GL]
    assert scratch and all(m.operand == 0 and m.buffer.bytes <= AVX512.l2_block_bytes for m in scratch)
    views = [m for s in scratch for m in _moves(s.body) if m.view and m.operand == 0]
    assert views and all(v.buffer.alias == 0 for v in views)


def test_benign_strides_get_no_scratch():
    impl = _synthesize("matmul 256x256x256 serial")
    assert not [m for m in _moves(impl) if m.buffer.level == Level.GL]


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512"])
def test_scratch_block_compiles_and_matches_the_reference(isa, tmp_path):
    """Pinned scratch blocks inside a peeled split of k, at awkward sizes: A (f32, and bf16 widened on the
    way) and B in padded panels; compiled and compared with the reference loop."""
    from morello_build.check.testing import check_headers
    from morello_build.codegen import emit_header
    from morello_build.synth import schedule as S

    t = TARGETS[isa]
    kernels = []
    cases = (
        ("matmul 37x70x29", "a", "row", None),
        ("matmul 13x45x17 a=bf16", "a", "row", "f32"),
    ) + ((("matmul 9x40x21", "b", S.packed(2, t.lanes), None),) if t.lanes else ())  # padded panels of W columns
    for i, (text, operand, layout, dtype) in enumerate(cases):
        impl = S.split(
            text, 32, target=t, body=lambda s: S.move(s, operand, "GL", layout=layout, dtype=dtype, target=t)
        )
        assert [m for m in _moves(impl) if m.buffer.level == Level.GL], "no scratch block in the program"
        kernels.append((text, emit_header(parse_spec(text), impl, t, name=f"k{i}", namespace="scr"), "scr", f"k{i}"))
    res = check_headers(kernels, tmp_path)
    assert res.ok, res.output


@pytest.mark.parametrize(
    "text, why",
    [
        ("matmul 13x1024x8", "13 rows 4096 bytes apart would evict"),  # a stride class: all 13 rows in one set
        ("matmul 13x1000x8", "13 strided runs (more than the 12 L1 ways)"),  # unknown stride: assume the worst
    ],
)
def test_schedule_explains_a_refused_view(text, why):
    from morello_build.synth import schedule as S

    t = AVX512
    with pytest.raises(ValueError, match=r"move a -> L1 does not apply .*" + re.escape(why)):
        S.split(text, 64, target=t, body=lambda s: S.move(s, "a", "L1", target=t))
