"""The Impl interpreter: conversions, and that broken programs (gaps, double coverage, lost stores,
writes to inputs) give wrong answers or errors rather than passing."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from morello_build.check.interpret import (
    InterpretError,
    convert,
    execute,
    interpret,
    reference,
    tile_origins,
)
from morello_build.ir.impl import Kernel, Loop, MoveImpl
from morello_build.ir.spec import DType
from morello_build.synth import schedule as S
from morello_build.target import TARGETS

BF16 = ml_dtypes.bfloat16
AVX512 = TARGETS["avx512"]


def ints(shape, seed=0):
    return np.random.default_rng(seed).integers(-3, 4, shape)


def run_and_compare(impl, seed=0):
    a, b, c = (ints(t.shape, seed + i) for i, t in enumerate(impl.spec.op.operands))
    got = interpret(impl, a, b, c)
    want = reference(impl.spec, a, b, c)
    return np.array_equal(got.astype(np.float64), want.astype(np.float64))


def test_bf16_narrowing_rounds_to_nearest_even():
    one = 1.0
    ulp = 2.0**-7  # bf16 spacing at 1.0
    x = np.array([one + ulp / 2, one + 3 * ulp / 2, one + ulp / 2 + 2.0**-20, -(one + ulp / 2)], np.float32)
    y = convert(x, DType.BF16).astype(np.float64)
    assert list(y) == [one, one + 2 * ulp, one + ulp, -one]


def test_bf16_widening_is_exact():
    raw = np.arange(0, 1 << 16, 7, dtype=np.uint16)
    b = raw.view(BF16)
    w = convert(b, DType.F32)
    finite = np.isfinite(w)
    assert np.array_equal(convert(w[finite], DType.BF16).view(np.uint16), raw[finite])


def test_tile_origins():
    loop = S.tile_out("matmul 7x3x5", (3, 5), target=AVX512)
    assert [tile_origins(loop, r) for r in loop.regions] == [[(0, 0, 0, 0), (0, 3, 0, 0)], [(0, 6, 0, 0)]]
    loop = S.tile_out("matmul 4x1x9 batch=2", (1, 2, 4), target=AVX512)
    assert len(tile_origins(loop, loop.regions[0])) == 2 * 2 * 2


def test_peeled_split_origins_and_flags():
    """K=7 by 3 without accum: tile 0 overwrites C, tile 1 and the ragged tile 2 add to it."""
    loop = S.split("matmul 2x7x3", 3, target=AVX512)
    assert loop.peeled
    assert [tile_origins(loop, r) for r in loop.regions] == [[(0, 0, 0, 0)], [(0, 0, 3, 0)], [(0, 0, 6, 0)]]
    assert [r.body.spec.op.accum for r in loop.regions] == [False, True, True]
    assert run_and_compare(loop)


def test_synthesized_program_runs():
    impl = S.synthesize("matmul 3x4x5 a=bf16 b=bf16:col c=bf16 accum batch=2", AVX512)
    assert run_and_compare(impl)


def test_float_inputs_within_tolerance():
    impl = S.synthesize("matmul 2x33x5 b=bf16:col", AVX512)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(t.shape) for t in impl.spec.op.operands[:2])
    got = interpret(impl, a, b)
    want = reference(impl.spec, a, b)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _loop_of(spec_text, tile, **kw):
    impl = S.tile_out(spec_text, tile, target=AVX512, **kw)
    assert isinstance(impl, Loop)
    return impl


def test_missing_region_is_detected():
    impl = _loop_of("matmul 7x4x4", (4, 4))  # main tile + ragged end
    assert len(impl.regions) == 2
    assert run_and_compare(impl)
    broken = dataclasses.replace(impl, regions=impl.regions[:1])
    a, b = ints((1, 7, 4)), ints((1, 4, 4), 1)
    got = interpret(broken, a, b)
    assert np.isnan(got[0, 4:]).all()  # the rows nobody wrote
    assert not run_and_compare(broken)


def test_double_coverage_is_detected():
    impl = _loop_of("matmul 8x4x4 accum", (4, 4))
    main = impl.regions[0]
    assert main.count == 2
    broken = dataclasses.replace(impl, tile=(1, 2, 4, 4), regions=(dataclasses.replace(main, count=4),))
    with pytest.raises(InterpretError):  # region shapes no longer match the tile
        run_and_compare(broken)
    # A loop whose region list names the same tiles twice accumulates them twice.
    doubled = dataclasses.replace(impl, regions=(main, main))
    assert not run_and_compare(doubled)


def test_lost_store_and_load_are_detected():
    impl = S.move("matmul 4x4x4 accum", "c", "VRF", target=AVX512)
    assert isinstance(impl, MoveImpl) and impl.load is not None and impl.store is not None
    assert run_and_compare(impl)
    with pytest.raises(InterpretError, match="never stored"):
        run_and_compare(dataclasses.replace(impl, store=None))
    with pytest.raises(InterpretError, match="never loaded"):
        run_and_compare(dataclasses.replace(impl, load=None))


def test_shape_mismatch_is_detected():
    impl = S.synthesize("matmul 4x4x4", AVX512)
    with pytest.raises(InterpretError, match="shape"):
        interpret(impl, ints((1, 4, 5)), ints((1, 5, 4)))


def test_kernel_of_the_wrong_kind_raises():
    k = Kernel(S.to_spec("matmul 1x1x1", TARGETS["scalar"]), "memzero", 0.0)
    z = np.zeros((1, 1, 1), np.float32)
    with pytest.raises(InterpretError, match="does not implement"):
        execute(k, [z, z.copy(), z.copy()])


def test_inputs_are_never_written():
    impl = S.synthesize("matmul 3x5x4 a=bf16 c=bf16 accum", AVX512)
    a, b, c = ints((1, 3, 5)), ints((1, 5, 4), 1), ints((1, 3, 4), 2)
    a0, b0 = a.copy(), b.copy()
    interpret(impl, a, b, c)
    assert np.array_equal(a, a0) and np.array_equal(b, b0)
