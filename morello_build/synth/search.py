"""Memoized top-down dynamic programming over specs.

The best program for a spec is the cheapest (see ``cost.better``) over every action that applies,
each sub-spec solved recursively once. Actions are enumerated in a fixed order and ties keep the first,
so the result is deterministic.

The memo answers a spec under other limits only where a fresh search would do exactly what the one that
found the answer did: the limits enter the search only as actions refused for lack of memory, so an answer
holds over the range of limits in which the search of that spec, and of every sub-spec under it, admits the
same actions. Reusing it wherever it merely fits would not do: the per-spec choice is the cheapest by its
own cost, but a parent adds its children's parts by the overlap rule (cost.py), so more memory can give a
parent a worse program, and answers would depend on the order of queries.
"""

from __future__ import annotations

import gc
import sys
from typing import Callable

from morello_build.ir.spec import LIMITED_LEVELS, Spec, canonicalize
from morello_build.synth.actions import Plan, enumerate_actions
from morello_build.synth.cost import ZERO, better_keyed, bound_parts, order_key

ANY = sys.maxsize  # the upper end of a range no refusal bounds


def _open_range() -> tuple[list[int], list[int]]:
    """The range of limits (lo, hi per limited level) of a spec whose search has refused and admitted nothing yet:
    every limits; its actions and sub-specs narrow it (Search.apply)."""
    return [0] * len(LIMITED_LEVELS), [ANY] * len(LIMITED_LEVELS)


class NoProgram(Exception):
    """No program implements the spec within its memory limits."""


class Search:
    def __init__(self, target, progress: Callable[[int], None] | None = None, store=None, prune=True):
        self.target = target
        self.prune = prune
        # op -> [(lo, hi, impl or None)]: the answer for every limits from lo to hi (per limited level, both
        # included): lo is the most memory the buffers admitted anywhere in its search hold at once, hi one
        # byte less than the least an action refused for lack of memory needs (see the module's docstring).
        self.memo: dict[object, list] = {}
        self._lo, self._hi = _open_range()  # of the spec being searched
        self._found = None  # the memo entry (lo, hi, impl) of the answer _best gave last
        self.visited = 0
        self._progress = progress
        # optional persistent memo: get(spec, search) -> (found, impl, (lo, hi)); put(spec, impl, action, lo, hi)
        self._store = store
        self._bounds: dict[object, tuple] = {}

    def best(self, spec: Spec):
        """The best Impl for ``spec``, or None if nothing fits its limits."""
        # The search allocates millions of small objects that its memo keeps (specs, Impl nodes), and next to no
        # cycles: the cyclic collector would only traverse them again and again (at a young-generation threshold
        # of 100,000 its collections still took 7% of a 10,000-spec search, Zen 3), so it is off during the
        # outermost call. What the search leaves is collected as usual afterwards; a process that keeps or exits
        # with its memo may gc.freeze() it (cli.main does: see keep_out_of_collections).
        spec = canonicalize(spec)
        if not gc.isenabled():
            return self._best(spec)
        gc.disable()
        try:
            return self._best(spec)
        finally:
            gc.enable()

    def _best(self, spec: Spec):
        """The best Impl for ``spec`` (None: nothing fits), and in ``self._found`` its memo entry, with the
        range of limits it holds over. The memo answers a spec met again under other limits in that range:
        outside a buffer that took some memory, or under more memory than any action of its search lacked (a
        fifth of the specs of a 64^3 search, two fifths of a bf16 one for 16 threads). ``spec`` is canonical
        (canonicalize): best() makes it so, and every action's plan its sub-specs."""
        if self._lookup(spec):
            return self._found[2]
        outer = self._lo, self._hi
        self._lo, self._hi = _open_range()
        if self._store is not None:
            found, impl, (lo, hi) = self._store.get(spec, self)
            if found:  # the range is its box's (narrowed by the sub-specs its replay met)
                self._remember(spec, map(max, lo, self._lo), map(min, hi, self._hi), impl)
                self._lo, self._hi = outer
                return impl
        best = best_action = best_key = best_index = None
        for bound, index, action, plan in self._plans(spec):
            budget = None if best is None else best.cost
            if self.prune and budget is not None and bound > budget:
                break  # the plans come in the order of their bounds: none of the rest can win either
            impl = self._build(spec, plan, budget=budget)
            if impl is None:
                continue
            key = order_key(impl)
            if best is None or better_keyed(impl, key, best, best_key, index, best_index):
                best, best_action, best_key, best_index = impl, action, key, index
        lo = self._lo if best is None else map(max, self._lo, best.peaks)
        lo, hi = self._remember(spec, lo, self._hi, best)
        self._lo, self._hi = outer
        self.visited += 1
        if self._progress and self.visited % 256 == 0:
            self._progress(self.visited)
        if self._store is not None:
            self._store.put(spec, best, best_action, lo, hi)
        return best

    def _lookup(self, spec: Spec) -> bool:
        """Whether the memo answers ``spec`` (the entry in ``self._found``)."""
        l1, vrf, rf = spec.limits.as_tuple()
        for entry in self.memo.get(spec.op, ()):  # unrolled: once per spec visited
            (l1_lo, vrf_lo, rf_lo), (l1_hi, vrf_hi, rf_hi), _ = entry
            if l1_lo <= l1 <= l1_hi and vrf_lo <= vrf <= vrf_hi and rf_lo <= rf <= rf_hi:
                self._found = entry
                return True
        return False

    def _remember(self, spec: Spec, lo, hi, impl) -> tuple:
        """Remember ``impl`` as the answer for the limits from ``lo`` to ``hi``; those two as tuples."""
        entry = self._found = (tuple(lo), tuple(hi), impl)
        self.memo.setdefault(spec.op, []).append(entry)
        return entry[:2]

    def _narrow(self, limits, sub_limits) -> None:
        """Narrow the range of the spec being searched (under ``limits``) to that of the sub-spec just solved
        (under ``sub_limits``: what the action left), shifted by the memory the action took."""
        lo, hi = self._lo, self._hi
        sub_lo, sub_hi, _ = self._found
        if sub_limits is limits or sub_limits == limits:
            taken = (0,) * len(lo)
        else:
            taken = tuple(x - y for x, y in zip(limits.as_tuple(), sub_limits.as_tuple()))
        for i, d in enumerate(taken):
            if sub_lo[i] + d > lo[i]:
                lo[i] = sub_lo[i] + d
            if sub_hi[i] + d < hi[i]:
                hi[i] = sub_hi[i] + d

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
        if not isinstance(plan, Plan):  # a Refusal: the action does not apply here
            self._refused(plan)
            return None
        if budget is not None and self.prune and plan.lower_bound(self.bound) > budget:
            return None
        return self._build(spec, plan, bodies, budget)

    def _refused(self, refusal) -> None:
        """Narrow the range of the spec being searched by an action it refused for lack of memory."""
        if refusal.short_of is not None:  # ... under these limits: not with less than ``need`` bytes
            level, need = refusal.short_of
            self._hi[level] = min(self._hi[level], need - 1)

    def _plans(self, spec: Spec) -> list[tuple]:
        """(lower bound, enumeration index, action, plan) of every action that applies to ``spec``, the least
        bound first. Trying the likeliest winners first gives the budget its final value early, so more plans
        are skipped unbuilt (4x2048x16384 q4_0 aquant on avx2: half the loops built); better_keyed's indexes keep the
        choice among equals that the enumeration's order gives."""
        plans = []
        for index, action in enumerate(enumerate_actions(spec, self.target)):
            plan = action.plan(spec, self.target)
            if isinstance(plan, Plan):
                plans.append((plan.lower_bound(self.bound) if self.prune else 0.0, index, action, plan))
            else:
                self._refused(plan)
        plans.sort()  # by bound, then index (unique: the actions and plans are never compared)
        return plans

    def _build(self, spec: Spec, plan: Plan, bodies: dict[int, Callable] | None = None, budget=None):
        """``plan``'s Impl (apply): its sub-specs synthesized, or built by ``bodies``; None where one has no
        program, or where the children built so far and the bounds of the rest exceed ``budget``."""
        children = []
        done = list(ZERO)  # the parts of the plan's built children (for bounds)
        weights = plan.run_weights
        last = len(plan.subspecs) - 1
        for i, sub in enumerate(plan.subspecs):
            maker = bodies.get(i) if bodies else None
            if maker:
                child = maker(sub)
            else:
                child = self._best(sub)
                self._narrow(spec.limits, sub.limits)
            if child is None:
                return None
            children.append(child)
            if budget is not None and self.prune and i < last:
                done = [d + weights[i] * x for d, x in zip(done, child.parts)]
                if plan.lower_bound(self.bound, done, i + 1) > budget:
                    return None
        return plan.build(tuple(children))


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
