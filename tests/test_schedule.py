"""The manual scheduling API: pinned outer levels plus synthesis compute the spec; bad actions raise."""

from __future__ import annotations

import numpy as np
import pytest

from morello_build.check.interpret import interpret, reference
from morello_build.ir.grammar import UserSpec
from morello_build.ir.impl import Accum, Kernel, Loop, MoveImpl, format_tree
from morello_build.ir.spec import Level, MemoryLimits
from morello_build.synth import schedule as S
from morello_build.synth.search import NoProgram
from morello_build.target import TARGETS

AVX512 = TARGETS["avx512"]
SCALAR = TARGETS["scalar"]


def check(impl, seed=0):
    rng = np.random.default_rng(seed)
    a, b, c = (rng.integers(-3, 4, t.shape) for t in impl.spec.op.operands)
    got = interpret(impl, a, b, c)
    assert np.array_equal(got.astype(np.float64), reference(impl.spec, a, b, c).astype(np.float64)), format_tree(impl)


def test_pinned_parallel_tile_and_move_then_synthesis():
    t = AVX512
    spec = S.to_spec("matmul 4x32x32 b=bf16:col", t)
    impl = S.tile_out(
        spec,
        (2, 16),
        parallel=True,
        target=t,
        body=lambda s: S.move(s, "b", "L1", layout=S.packed(2, 16), dtype="f32", target=t),
    )
    assert isinstance(impl, Loop) and impl.parallel and impl.tile == (1, 2, 32, 16)
    inner = impl.regions[0].body
    assert isinstance(inner, MoveImpl) and inner.buffer.level == Level.L1 and not inner.view
    assert inner.buffer.dtype.value == "f32" and inner.buffer.layout == S.packed(2, 16)
    check(impl)


def test_ragged_tiles_are_synthesized():
    t = AVX512
    spec = S.to_spec("matmul 7x5x9 accum", t)
    impl = S.tile_out(spec, (4, 4), target=t, body=lambda s: S.move(s, "c", "VRF", target=t))
    assert len(impl.regions) == 4  # main, row end, column end, corner
    assert isinstance(impl.regions[0].body, MoveImpl)
    check(impl)


def test_full_manual_schedule_scalar():
    """Every level pinned by hand on the scalar target: 2x3x2, C in registers, K one at a time."""
    t = SCALAR
    spec = S.to_spec("matmul 2x3x2", t)

    def mac(s):  # c (RF) += a * b, with a and b loaded into registers
        return S.move(
            s,
            "a",
            "RF",
            target=t,
            body=lambda s2: S.move(s2, "b", "RF", target=t, body=lambda s3: S.select(s3, "mac_scalar", t)),
        )

    impl = S.tile_out(
        spec,
        (1, 1),
        target=t,
        body=lambda s: S.move(
            s,
            "c",
            "RF",
            target=t,
            body=lambda s1: S.to_accum(s1, target=t, body=lambda s2: S.split(s2, 1, target=t, body=mac)),
        ),
    )
    check(impl)
    # The hand schedule is a valid program, so it cannot beat the search's optimum.
    assert S.synthesize(spec, t).cost <= impl.cost + 1e-9


def test_to_accum_and_split_pinned():
    t = TARGETS["avx2"]
    spec = S.to_spec("matmul 3x8x5", t)
    impl = S.to_accum(spec, target=t, body=lambda s: S.split(s, 3, target=t))
    assert isinstance(impl, Accum) and isinstance(impl.body, Loop) and impl.body.dims == (2,)
    check(impl)


def test_split_without_accum_peels_the_first_slice():
    """The body builds the accumulating slices (here with C in registers); the first slice's program is
    derived from it and overwrites C, so nothing zeroes C in memory."""
    t = TARGETS["avx2"]
    impl = S.split("matmul 3x8x5", 3, target=t, body=lambda s: S.move(s, "c", "VRF", target=t))
    assert isinstance(impl, Loop) and impl.peeled
    first, *rest = impl.regions
    assert not first.body.spec.op.accum and first.body.load is None
    assert all(r.body.spec.op.accum for r in rest) and rest[0].body.load is not None  # rest[-1]: ragged
    check(impl)


def test_spec_strings_and_isa_names_accepted():
    impl = S.tile_out("matmul 4x4x4", (2, 4), target="avx2")
    check(impl)
    assert S.synthesize("matmul 4x4x4", "avx2").spec == impl.spec


def test_select_kernel_leaf():
    t = SCALAR
    spec = S.to_spec("matmul 1x1x1", t)
    impl = S.move(
        spec,
        "c",
        "RF",
        target=t,
        body=lambda s: S.to_accum(
            s,
            target=t,
            body=lambda s1: S.move(
                s1,
                "a",
                "RF",
                target=t,
                body=lambda s2: S.move(s2, "b", "RF", target=t, body=lambda s3: S.select(s3, "mac_scalar", t)),
            ),
        ),
    )
    k = impl
    while not isinstance(k, Kernel):
        k = k.body
    assert k.name == "mac_scalar"
    check(impl)


# -- invalid actions raise ValueError with a reason --------------------------------------------------
@pytest.mark.parametrize(
    "call, match",
    [
        (lambda s, t: S.tile_out(s, (4, 4), target=t), "nothing to loop over"),
        (lambda s, t: S.tile_out(s, (0, 2), target=t), "between 1"),
        (lambda s, t: S.tile_out(s, (8, 2), target=t), "between 1"),
        (lambda s, t: S.tile_out(s, (2,), target=t), "2 or 3 sizes"),
        (lambda s, t: S.move(s, "x", "L1", target=t), "unknown operand"),
        (lambda s, t: S.move(s, "a", "L7", target=t), "unknown level"),
        (lambda s, t: S.move(s, "a", "GL", target=t), "needs a layout"),
        (lambda s, t: S.move(s, "a", "L1", layout="diag", target=t), "unknown layout"),
        (lambda s, t: S.move(s, "a", "L1", dtype="f64", target=t), "unknown dtype"),
        (lambda s, t: S.select(s, "nope", t), "unknown kernel"),
        (lambda s, t: S.select(s, "vload", t), "implements a move"),
        (lambda s, t: S.select(s, "mac_scalar", t), "does not apply"),
        (lambda s, t: S.select(s, "dot_bf16_dp", t), "lacks"),
        (
            lambda s, t: S.tile_out(s, (2, 2), target=t, body=lambda c: S.synthesize("matmul 1x1x1", t)),
            "body must return a program",
        ),
    ],
)
def test_invalid_actions_raise(call, match):
    t = AVX512
    spec = S.to_spec("matmul 4x4x4", t)
    with pytest.raises(ValueError, match=match):
        call(spec, t)


def test_invalid_actions_in_context():
    t = AVX512
    acc = S.to_spec("matmul 4x4x4 accum", t)
    with pytest.raises(ValueError, match="already accumulates"):
        S.to_accum(acc, target=t)
    with pytest.raises(ValueError, match="between 1 and 3"):
        S.split(acc, 4, target=t)
    with pytest.raises(ValueError, match="no vector registers"):
        S.move(S.to_spec("matmul 4x4x4", SCALAR), "c", "VRF", target=SCALAR)
    with pytest.raises(ValueError, match="serial"):
        S.tile_out(S.to_spec("matmul 4x4x4 serial", t), (2, 2), parallel=True, target=t)
    with pytest.raises(ValueError, match="already at L1"):
        S.move(acc, "a", "L1", target=t, body=lambda s: S.move(s, "a", "L1", target=t))
    tight = UserSpec(8, 8, 8).to_spec(MemoryLimits(64, 0, 0))
    with pytest.raises(ValueError, match="bytes"):
        S.move(tight, "b", "L1", layout="col", target=t)
    with pytest.raises(ValueError, match="target is required"):
        S.tile_out(acc, (2, 2))


def test_actions_say_why_they_do_not_apply():
    """Each action's plan returns a Refusal (a stable code and a one-line reason) where it does not apply;
    the scheduling API reports that reason."""
    from morello_build.ir.spec import DType
    from morello_build.synth.actions import (
        MoveOperand,
        Plan,
        Refusal,
        Select,
        Tile,
        ToAccum,
    )

    t = AVX512
    spec = S.to_spec("matmul 4x4x4", t)
    acc = S.to_spec("matmul 4x4x4 accum", t)
    c_in_vrf = MoveOperand(2, Level.VRF).plan(spec, t).subspecs[0]  # C in registers, not accumulating
    a_in_l1 = MoveOperand(0, Level.L1).plan(spec, t).subspecs[0]  # a view of A in L1
    packed_b = MoveOperand(1, Level.L1, S.packed(2, 16)).plan(S.to_spec("matmul 4x64x64", t), t).subspecs[1]
    cases = [
        (Tile((1, 4, 4, 4)), spec, t, "nothing-to-loop"),
        (Tile((1, 0, 4, 4)), spec, t, "bad-tile"),
        (Tile((1, 4, 4)), spec, t, "bad-tile"),
        (Tile((1, 4, 64, 8)), packed_b, t, "cuts-strip"),
        (Tile((1, 2, 4, 4), parallel=True), S.to_spec("matmul 4x4x4 serial", t), t, "serial"),
        (Tile((1, 4, 2, 4), parallel=True), acc, t, "parallel-split"),
        (Tile((1, 2, 2, 4)), spec, t, "peel-tiles-k-only"),
        (Tile((1, 4, 2, 4)), c_in_vrf, t, "peel-in-registers"),
        (
            Tile((1, 4, 2, 4)),
            S.to_spec("matmul 4x4x4 c=bf16", TARGETS["avx512_bf16"]),
            TARGETS["avx512_bf16"],
            "rounds-partial-sums",
        ),
        (ToAccum(), acc, t, "accumulates"),
        (ToAccum(), MoveOperand(2, Level.VRF).plan(acc, t).subspecs[0], t, "no-reduction"),
        (Select("nope"), spec, t, "unknown-kernel"),
        (Select("vload"), spec, t, "wrong-kind"),
        (Select("dot_bf16_dp"), spec, t, "lacks-features"),
        (Select("mac_scalar"), spec, t, "kernel-does-not-fit"),
        (MoveOperand(0, Level.GL), spec, t, "needs-layout"),
        (MoveOperand(0, Level.L2), a_in_l1, t, "not-faster"),
        (MoveOperand(0, Level.L1, a_in_l1.op.a.layout), a_in_l1, t, "same-copy"),
        (MoveOperand(2, Level.VRF), spec, SCALAR, "no-vectors"),
        (MoveOperand(0, Level.L2, S.row_major(), DType.F32), spec, t, "l2-copy"),
        (MoveOperand(1, Level.L1, S.col_major()), UserSpec(8, 8, 8).to_spec(MemoryLimits(64, 0, 0)), t, "no-memory"),
    ]
    for action, s, target, code in cases:
        why = action.plan(s, target)
        assert isinstance(why, Refusal) and why.code == code, (action, s.describe(), why)
        assert why.reason and "{}" not in why.reason
    assert isinstance(MoveOperand(1, Level.L1, S.col_major()).plan(spec, t), Plan)
    assert str(Tile((1, 4, 4, 4)).plan(spec, t)) == "the tile is the whole iteration space: nothing to loop over"


def test_synthesize_no_program():
    with pytest.raises(NoProgram, match="memory limits"):
        S.synthesize(UserSpec(2, 2, 2).to_spec(MemoryLimits(0, 0, 0)), SCALAR)


def test_no_parallel_loop_over_registers():
    """Registers belong to one thread: once C lives in vector (or scalar) registers, the body must be
    serial, so a parallel loop inside the move does not apply."""
    t = AVX512
    spec = S.to_spec("matmul 4x4x32 accum", t)
    with pytest.raises(ValueError, match="serial"):
        S.move(spec, "c", "VRF", target=t, body=lambda s: S.tile_out(s, (2, 32), parallel=True, target=t))
    with pytest.raises(ValueError, match="serial"):
        S.move(
            S.to_spec("matmul 2x2x1 accum", SCALAR),
            "c",
            "RF",
            target=SCALAR,
            body=lambda s: S.tile_out(s, (1, 1), parallel=True, target=SCALAR),
        )
    # A packed L1 buffer is ordinary memory: a parallel loop over it is allowed.
    impl = S.move(
        S.to_spec("matmul 4x32x32 b=bf16:col", t),
        "b",
        "L1",
        layout=S.packed(2, 16),
        dtype="f32",
        target=t,
        body=lambda s: S.tile_out(s, (2, 32), parallel=True, target=t),
    )
    check(impl)
