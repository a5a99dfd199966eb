"""The shuffle and integer-multiply port classes (vec_shuffle, vec_imul), and the M = 4 choice they decide."""

from __future__ import annotations

import pytest

from morello_build.synth import cost
from morello_build.synth.actions import policy
from morello_build.target import get_target
from morello_build.target import kernels as catalog
from morello_build.target.microarch import BY_NAME
from morello_build.tools.api import synthesize_program

I4_M4 = "matmul 4x2048x16384 a=f32 b=i4:col group=32 scales=f16 zero aquant=i8"


def test_shuffles_and_integer_multiplies_fill_their_own_port_classes():
    costs = get_target("avx2", profile="builtin").costs
    p = cost.parts(cost.Features.of(vec_shuffle=4, vec_imul=2, vec_op=3), costs)
    at = cost.CLASSES.index
    assert p[at("shuffle")] == 4 * costs.vec_shuffle and p[at("imul")] == 2 * costs.vec_imul
    assert p[at("alu")] == 3 * costs.vec_op  # no longer lumped with the ALU ops
    assert p[at("dispatch")] == pytest.approx(9 / costs.dispatch)


def test_profiles_price_the_classes_from_their_pipes():
    gc, zen3 = BY_NAME["golden-cove"].cost_table(32), BY_NAME["zen3"].cost_table(32)
    assert gc.vec_shuffle == 1.0 and zen3.vec_shuffle == 0.5  # port 5 alone; FP1 and FP2
    assert gc.vec_imul == zen3.vec_imul == 0.5  # ports 0 and 1; FP0 and FP3


def _best_with(keep: str, monkeypatch, isa="avx2", profile="golden-cove"):
    """The best program for I4_M4 with ``keep`` the only integer dot kernel in the catalog."""
    rivals = ("dot_int", "dot_int_vnni", "dot_int4", "dot_int_cols8")
    monkeypatch.setattr(catalog, "CATALOG", tuple(k for k in catalog.CATALOG if k.name == keep or k.name not in rivals))
    policy._selects.cache_clear()  # the kernel actions are cached per target and per op: this catalog's
    policy._offered.cache_clear()
    try:
        return synthesize_program(I4_M4, isa=isa, threads=1, db=None, profile=profile)[2]
    finally:
        policy._selects.cache_clear()
        policy._offered.cache_clear()


def test_m4_i4_golden_cove_prefers_dot_int4_over_the_shuffle_bound_dot_int(monkeypatch):
    """dot_int widens each column's nibbles with two unpacks and an insert per block and broadcasts sa * sb per
    output (port 5 on Intel); dot_int4 shares A's rearranging over 2-4 columns. Measured on a Golden Cove Xeon
    (1 thread, scripts/kernel_ab.py): dot_int 4x1 9,175 us, dot_int4 2x4 3,949 us."""
    with monkeypatch.context() as m:
        slow = _best_with("dot_int", m)
    with monkeypatch.context() as m:
        fast = _best_with("dot_int4", m)
    assert fast.cost < slow.cost
    shuffle = cost.CLASSES.index("shuffle")
    assert slow.parts[shuffle] > fast.parts[shuffle]
