"""Peeled k loops: the overwriting first slice derived from an accumulating program ignores what C
held before, costs no more, and the search uses it so that large matmuls never zero C in memory."""

from __future__ import annotations

import numpy as np
import pytest

from morello_build.check.interpret import interpret, reference
from morello_build.ir.grammar import parse_spec
from morello_build.ir.impl import Kernel, Loop, format_tree, walk
from morello_build.synth.overwrite import overwriting
from morello_build.synth.search import Search
from morello_build.target import TARGETS

_SPECS = (
    "matmul 7x13x19 serial",  # ragged everywhere
    "matmul 1x1x1 serial",
    "matmul 6x64x33 serial",
    "matmul 2x37x24 b=bf16:col serial",
    "matmul 3x4x5 batch=2 a=f32:col b=bf16 c=f32:col serial",
)


# One search per ISA for this module's specs (they share sub-programs: a third less search time) and the memo
# entries already checked, each with whether it had an overwriting program: each test checks the entries its
# spec added (those of a fresh search of it, less those an earlier spec had put there and checked).
_SEARCHES: dict = {}
_CHECKED: dict = {}


@pytest.mark.parametrize(
    "text, isa",
    [(t, isa) for t in _SPECS for isa in ("avx2", "avx512", "avx512_bf16")],
)
def test_overwriting_program_ignores_the_old_output(text, isa):
    target = TARGETS[isa]
    spec = parse_spec(text + " accum").to_spec(target.limits())
    search = _SEARCHES.setdefault(isa, Search(target))
    checked = _CHECKED.setdefault(isa, {})
    derived = 0
    assert search.best(spec) is not None
    for op, entries in search.memo.items():
        for limits, _, impl in entries:  # (lo, hi, impl)
            if impl is None or not op.accum or op.kind != "matmul" or (op, limits) in checked:
                continue
            over = overwriting(impl, target)
            checked[op, limits] = over is not None
            if over is None:
                continue
            derived += 1
            assert not over.spec.op.accum and over.spec.op.operands == op.operands
            assert over.cost <= impl.cost + 1e-9 and over.peaks == impl.peaks
            rng = np.random.default_rng(derived)
            a, b = (rng.integers(-3, 4, t.shape) for t in op.operands[:2])
            garbage = rng.integers(100, 200, op.c.shape)  # must not leak into the result
            got = interpret(over, a, b, garbage)
            want = reference(over.spec, a, b, garbage)
            assert np.array_equal(got.astype(np.float64), want.astype(np.float64)), format_tree(over)
    assert any(checked.values())


def test_large_matmul_peels_k_instead_of_zeroing_c():
    """256x256x256 splits k (B is packed in L1 by 128-row slices): the first slice stores C, the
    others load and add; no memzero pass over C."""
    target = TARGETS["avx512"]
    spec = parse_spec("matmul 96x256x128 serial").to_spec(target.limits())
    impl = _SEARCHES.setdefault("avx512", Search(target)).best(spec)  # the memo of the tests above (after them)
    nodes = list(walk(impl))
    peeled = [n for n in nodes if isinstance(n, Loop) and n.peeled]
    assert peeled, format_tree(impl)
    assert not any(isinstance(n, Kernel) and n.name == "memzero" for n in nodes), format_tree(impl)
    first, *rest = peeled[0].regions
    assert not first.body.spec.op.accum and first.count == 1 and first.start == 0
    assert all(r.body.spec.op.accum for r in rest) and rest[0].start == 1
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-3, 4, t.shape) for t in spec.op.operands[:2])
    c = rng.integers(100, 200, spec.op.c.shape)
    assert np.array_equal(interpret(impl, a, b, c), reference(spec, a, b, c))


def test_no_overwriting_program_from_a_bare_kernel():
    """Kernels add to C in registers; a kernel node alone has no load of C to drop."""
    target = TARGETS["avx512"]
    spec = parse_spec("matmul 1x64x1 accum serial").to_spec(target.limits())
    kernels = [n for n in walk(Search(target).best(spec)) if isinstance(n, Kernel)]
    assert kernels and all(overwriting(k, target) is None for k in kernels)
