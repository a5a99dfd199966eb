"""Memoized top-down dynamic programming over specs.

The best program for a spec is the cheapest (see ``cost.better``) over every action that applies,
each sub-spec solved recursively once. Actions are enumerated in a fixed order and ties keep the first,
so the result is deterministic.
"""

from __future__ import annotations

import gc
import sys
from typing import Callable

from morello_build.ir.spec import LIMITED_LEVELS, Spec, canonicalize
from morello_build.synth.actions import Plan, enumerate_actions
from morello_build.synth.cost import ZERO, better_keyed, bound_parts, order_key

ALL_LIMITS = (1 << len(LIMITED_LEVELS)) - 1  # a mask of every limited level (spec.limit_bits)


class NoProgram(Exception):
    """No program implements the spec within its memory limits."""


class Search:
    def __init__(self, target, progress: Callable[[int], None] | None = None, store=None, prune=True):
        self.target = target
        self.prune = prune
        # op -> [(limits, impl or None, mask)]: an Impl found under limits L with peak P is also the best
        # answer for every limits between P and L, and "nothing fits" under L holds below L too; at a level
        # not in ``mask`` (those whose limits shaped the answer: see _best), for any limit above P.
        self.memo: dict[object, list] = {}
        self._shaped = 0  # the mask of the levels whose limits shaped the answer being searched
        self.visited = 0
        self._progress = progress
        self._store = store  # optional persistent memo: get(spec, search) / put(spec, impl, action)
        self._bounds: dict[object, tuple] = {}

    def best(self, spec: Spec):
        """The best Impl for ``spec``, or None if nothing fits its limits."""
        # The search allocates millions of small objects that its memo keeps (specs, Impl nodes), and next to no
        # cycles: the cyclic collector would only traverse them again and again (at a young-generation threshold
        # of 100,000 its collections still took 7% of a 10,000-spec search, Zen 3), so it is off during the
        # outermost call. What the search leaves is collected as usual afterwards; a process that keeps or exits
        # with its memo may gc.freeze() it (cli.main does: see keep_out_of_collections).
        self._shaped = 0
        spec = canonicalize(spec)
        if not gc.isenabled():
            return self._best(spec)
        gc.disable()
        try:
            return self._best(spec)
        finally:
            gc.enable()

    def _best(self, spec: Spec):
        """The best Impl for ``spec`` (None: nothing fits). The limit of a level shapes an answer where an
        action was refused for lack of its memory, in this search or in a sub-spec's. Under more memory at
        the other levels the search tries the same plans with the same children, so the memo answers them
        too: a spec met again outside a buffer that took some memory is not searched again (a fifth of the
        specs of a 64^3 search, two fifths of a bf16 one for 16 threads). ``spec`` is canonical (canonicalize):
        best() makes it so, and every action's plan its sub-specs."""
        found, hit, shaped = self._lookup(spec)
        if found:
            self._shaped |= shaped
            return hit
        if self._store is not None:
            found, impl = self._store.get(spec, self)
            if found:
                self._remember(spec, impl, ALL_LIMITS)  # as its box says (the DB does not tell)
                self._shaped = ALL_LIMITS
                return impl
        outer, self._shaped = self._shaped, 0
        best = best_action = best_key = None
        for action in enumerate_actions(spec, self.target):
            impl = self.apply(spec, action, budget=best.cost if best is not None else None)
            if impl is None:
                continue
            key = order_key(impl)
            if best is None or better_keyed(impl, key, best, best_key):
                best, best_action, best_key = impl, action, key
        shaped = self._shaped
        self._remember(spec, best, shaped)
        self._shaped = outer | shaped
        self.visited += 1
        if self._progress and self.visited % 256 == 0:
            self._progress(self.visited)
        if self._store is not None:
            self._store.put(spec, best, best_action, tuple(not shaped >> i & 1 for i in range(len(LIMITED_LEVELS))))
        return best

    def _lookup(self, spec: Spec):
        l1, vrf, rf = spec.limits.as_tuple()
        for (l1_max, vrf_max, rf_max), impl, shaped in self.memo.get(spec.op, ()):  # unrolled: once per spec visited
            if l1 <= l1_max and vrf <= vrf_max and rf <= rf_max and (impl is None or _fits(impl.peaks, l1, vrf, rf)):
                return True, impl, shaped
        return False, None, 0

    def _remember(self, spec: Spec, impl, shaped: int) -> None:
        """Remember ``impl`` as the answer under the spec's limits at the levels in ``shaped``, and under any
        limits at the others."""
        limits = tuple(x if shaped >> i & 1 else sys.maxsize for i, x in enumerate(spec.limits.as_tuple()))
        self.memo.setdefault(spec.op, []).append((limits, impl, shaped))

    @property
    def specs_stored(self) -> int:
        return sum(len(v) for v in self.memo.values())

    def bound(self, spec: Spec) -> tuple:
        """cost.bound_parts' nonzero parts as (class index, cycles) pairs (Plan.lower_bound), once per op (they
        do not depend on the limits)."""
        if not self.prune:
            return ()
        b = self._bounds.get(spec.op)
        if b is None:
            b = self._bounds[spec.op] = tuple((j, x) for j, x in enumerate(bound_parts(spec, self.target)) if x)
        return b

    def apply(self, spec: Spec, action, bodies: dict[int, Callable] | None = None, budget=None):
        """Apply one action; its sub-specs are synthesized unless ``bodies`` gives a builder for them.

        With a ``budget`` (the best cost found so far), plans whose lower bound exceeds it are skipped:
        they cannot win, and sub-specs are memoized independently of any budget.
        """
        plan = action.plan(spec, self.target)
        if not isinstance(plan, Plan):
            self._shaped |= plan.short_of
            return None  # a Refusal: the action does not apply here
        if budget is not None and self.prune and plan.lower_bound(self.bound) > budget:
            return None
        children = []
        done = list(ZERO)  # the parts of the plan's built children (for bounds)
        weights = plan.run_weights
        last = len(plan.subspecs) - 1
        for i, sub in enumerate(plan.subspecs):
            maker = bodies.get(i) if bodies else None
            child = maker(sub) if maker else self._best(sub)
            if child is None:
                return None
            children.append(child)
            if budget is not None and self.prune and i < last:
                done = [d + weights[i] * x for d, x in zip(done, child.parts)]
                if plan.lower_bound(self.bound, done, i + 1) > budget:
                    return None
        return plan.build(tuple(children))


def _fits(peaks, l1: int, vrf: int, rf: int) -> bool:
    return peaks[0] <= l1 and peaks[1] <= vrf and peaks[2] <= rf


def synthesize(spec: Spec, target, progress=None, store=None, prune=True):
    """Best program for ``spec`` on ``target``; raises NoProgram if none fits."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))
    search = Search(target, progress, store, prune)
    impl = search.best(spec)
    if impl is None:
        raise NoProgram(f"no program implements '{spec.describe()}' within its memory limits")
    return impl, search


def keep_out_of_collections() -> None:
    """For processes that own their lifetime (the CLI, test workers, cpp_tests' generator): move every object
    alive now, the searches' memos included, out of the cyclic collector's reach (gc.freeze). Its later
    collections would traverse them again for nothing (they hold no cycles), and so would the interpreter's
    final one at exit: 1.8-2.1 s after a 10,000-spec search (Zen 3; 0.06-0.08 s frozen). Not for a library
    call in a user's process: frozen garbage cycles are never freed."""
    gc.freeze()
