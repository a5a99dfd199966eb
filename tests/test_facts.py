"""Facts carried as data: each Level's, each op definition's, and the target's (machine and ISA facts)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from morello_build.ir import machine
from morello_build.ir.grammar import UserSpec, parse_spec
from morello_build.ir.levels import Alloc
from morello_build.ir.ops import MATMUL, MOVE, OPS, ZERO
from morello_build.ir.spec import LIMITED_LEVELS, Level, Matmul, MemoryLimits, Move, Spec, Zero
from morello_build.target import TARGETS, Target


def test_level_predicates():
    assert [lv for lv in Level if lv.is_register] == [Level.VRF, Level.RF]
    assert [lv for lv in Level if lv.is_memory] == [Level.GL, Level.L2, Level.L1]
    assert [lv for lv in Level if lv.is_cache] == [Level.L2, Level.L1]
    assert [lv for lv in Level if lv.has_memory_buffers] == [Level.GL, Level.L1]
    assert [lv for lv in Level if not lv.parallel_tileable] == [Level.VRF, Level.RF]
    assert LIMITED_LEVELS == (Level.L1, Level.VRF, Level.RF)
    assert (Level.GL.alloc, Level.L2.alloc, Level.L1.alloc, Level.RF.alloc) == (
        Alloc.SCRATCH,
        Alloc.NONE,
        Alloc.STACK,
        Alloc.REGISTERS,
    )
    # Still an ordered IntEnum (moves go to faster, larger levels) that round-trips through its value.
    assert Level.GL < Level.L1 < Level.RF and Level(3) is Level.VRF and int(Level.L2) == 1


def test_limits_follow_the_limited_levels():
    limits = MemoryLimits(4096, 64, 16)
    assert [limits.get(lv) for lv in Level] == [None, None, 4096, 64, 16]
    assert limits.minus(Level.GL, 1 << 30) == limits
    assert limits.minus(Level.VRF, 32) == MemoryLimits(4096, 32, 16)
    assert limits.minus(Level.RF, 17) is None
    assert Spec(Zero(parse_spec("matmul 2x2x2").to_spec().op.c)).limits == MemoryLimits(*machine.DEFAULT_LIMITS)


def test_op_classes_take_their_facts_from_the_definitions():
    for cls, d in ((Matmul, MATMUL), (Move, MOVE), (Zero, ZERO)):
        assert cls.definition is d and OPS[d.kind] is d
        assert (
            cls.kind,
            cls.iter_names,
            cls.operand_names,
            cls.outputs,
            cls.operand_iter_dims,
            cls.reduction_dims,
        ) == (d.kind, d.iter_names, d.operand_names, d.outputs, d.operand_iter_dims, d.reduction_dims)
    assert [MATMUL.operand_dim_names(i) for i in range(3)] == [
        ("batch", "m", "k"),
        ("batch", "k", "n"),
        ("batch", "m", "n"),
    ]
    user = UserSpec(3, 5, 7, batch=2)
    assert user.operand_shapes() == ((2, 3, 5), (2, 5, 7), (2, 3, 7))
    assert tuple(t.shape for t in user.to_spec().op.operands) == user.operand_shapes()


def test_op_semantics():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 4, 5)), rng.standard_normal((1, 3, 5))
    op = parse_spec("matmul 3x4x5 accum").to_spec().op
    (out,) = MATMUL.evaluate(op, [a, b, c], np.float64)
    assert np.allclose(out, c + a @ b)
    (out,) = MATMUL.evaluate(dataclasses.replace(op, accum=False), [a, b, None], np.float64)
    assert np.allclose(out, a @ b)
    assert MOVE.evaluate(Move(op.a, op.a), [a, None], np.float32)[0].dtype == np.float32
    assert not ZERO.evaluate(None, [np.full((1, 2, 2), np.nan)], np.float32)[0].any()


def test_targets_carry_machine_and_isa_facts():
    for t in TARGETS.values():
        assert (t.line_bytes, t.alias_min, t.alias_max, t.l2_ways) == (
            machine.LINE_BYTES,
            machine.ALIAS_MIN,
            machine.ALIAS_MAX,
            machine.L2_WAYS,
        )
        assert t.features - {"highway"} <= set(t.cpu_features)
        assert (t.helpers is None) == (t.lanes == 0) == (t.vtype is None) == (t.attr == "")
    avx2, bf16 = TARGETS["avx2"], TARGETS["avx512_bf16"]
    assert avx2.attr == '__attribute__((target("avx2,fma,f16c")))' and avx2.cpu_features == ("avx2", "fma", "f16c")
    assert dict(avx2.cpu_check)["leaf1_ecx"] == 1 << 12 | 1 << 29  # FMA, F16C: CPUID.1:ECX bits 12, 29
    assert bf16.target_attr == "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni"
    assert bf16.helpers == "avx512" and all(t.has("f16c") for t in TARGETS.values() if t.lanes)
    assert TARGETS["highway"].helpers == "hwy_avx2" and "bmi2" in TARGETS["highway"].target_attr
    with pytest.raises(ValueError, match="line size"):
        Target("odd", frozenset(), 0, 0, line_bytes=128)


@pytest.mark.parametrize(
    "spec,isa",
    [
        ("matmul 1x300x37 a=f32 b=bf16:col", "avx2"),
        ("matmul 1x64x5 b=f32:col", "avx512"),
        ("matmul 1x96x3 a=bf16 b=bf16:col", "avx512_bf16"),
        ("matmul 13x37x29", "avx2"),
    ],
)
def test_kernel_records_declare_the_vector_registers_they_use(spec, isa):
    """Every vector kernel of a synthesized program says how many registers it occupies, and that fits the
    target's register file (the record's register use is data the search and a reader can check)."""
    from morello_build.ir.impl import Kernel, walk
    from morello_build.tools import api

    _, target, impl, _ = api.synthesize_program(spec, isa=isa, db=None)
    kernels = [n for n in walk(impl) if isinstance(n, Kernel)]
    records = {n.name: target.kernel(n.name) for n in kernels}
    assert any(r.vector for r in records.values())
    for node in kernels:
        record = records[node.name]
        regs = record.vector_regs(node.spec.op, target)
        assert (regs >= 1) == record.vector, (node.name, regs)
        assert regs <= target.vector_regs, (node.name, regs)
