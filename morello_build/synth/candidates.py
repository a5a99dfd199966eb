"""Distinct candidate programs for a spec, best-first by model cost: for measuring the model and tuning.

A candidate pins the outer decisions of a program and synthesizes the rest, like manual scheduling
(schedule.py): every action the search offers at the root, each with its sub-specs synthesized; then,
for the cheapest few, every action at their *main child* (the sub-spec that costs the most: a loop's
body, a move's body, the accumulating body of to_accum) with the rest synthesized; and so on for a few
levels. Programs that lower to the same code count once. Each candidate carries its ``path``, the pinned
decisions outer first as (decision text, main child index), which ``replay`` turns back into the program
(the tuning DB stores it).
"""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir.impl import format_tree
from morello_build.ir.spec import Spec, canonicalize
from morello_build.synth.actions import Plan, enumerate_actions
from morello_build.synth.search import NoProgram, Search

Path = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Candidate:
    impl: object
    path: Path  # the pinned decisions, outer first: (decision text, index of the child pinned below)

    @property
    def cost(self) -> float:
        return self.impl.cost


def _main_child(plan: Plan, children) -> int:
    """The child that costs the most (weighted by how often it runs): where the alternatives matter; -1
    for a plan without children (a whole program: nothing below to pin)."""
    if not children:
        return -1
    weights = plan.run_weights  # children: one per sub-spec
    return max(range(len(children)), key=lambda i: (weights[i] * children[i].cost, -i))


class _Enumerator:
    def __init__(self, search: Search, width: int):
        self.search = search
        self.width = width
        self.memo: dict[tuple, list[Candidate]] = {}

    def alternatives(self, spec: Spec, depth: int) -> list[Candidate]:
        """Programs for ``spec`` with the first ``depth`` levels of main children pinned, cheapest first."""
        key = (spec, depth)
        if key not in self.memo:
            self.memo[key] = self._alternatives(spec, depth)
        return self.memo[key]

    def _alternatives(self, spec: Spec, depth: int) -> list[Candidate]:
        search, target = self.search, self.search.target
        expanded: list[tuple[Candidate, Plan, tuple, int]] = []
        for action in enumerate_actions(spec, target):
            plan = action.plan(spec, target)
            if not isinstance(plan, Plan):
                continue
            children = tuple(search.best(s) for s in plan.subspecs)
            if any(c is None for c in children):
                continue
            impl = plan.build(children)
            if impl is None:
                continue
            main = _main_child(plan, children)
            expanded.append((Candidate(impl, ((action.encode(spec.op), main),)), plan, children, main))
        expanded.sort(key=lambda e: e[0].cost)
        out = [e[0] for e in expanded]
        if depth > 1:
            for cand, plan, children, main in expanded[: self.width]:
                if main < 0:
                    continue
                for alt in self.alternatives(canonicalize(plan.subspecs[main]), depth - 1):
                    impl = plan.build(children[:main] + (alt.impl,) + children[main + 1 :])
                    if impl is not None:
                        out.append(Candidate(impl, cand.path + alt.path))
        out.sort(key=lambda c: c.cost)
        return out


def enumerate_candidates(
    user,
    target,
    limit: int = 30,
    *,
    depth: int = 3,
    width: int = 6,
    per_root: int | None = None,
    search: Search | None = None,
    key=None,
) -> list[Candidate]:
    """Up to ``limit`` distinct programs for ``user`` (a UserSpec) on ``target``, cheapest first; the first
    is the search's own pick. ``key(impl)`` says when two programs are the same (default: the lowered code).
    ``per_root`` keeps at most that many candidates with the same root decision, for a spread of programs
    (tile shapes, loop orders, packing, parallel splits) rather than the variants of one."""
    search = search or Search(target)
    spec = canonicalize(user.to_spec(target.limits()))
    best = search.best(spec)
    if best is None:
        raise NoProgram(f"no program implements '{spec.describe()}' within its memory limits")
    key = key or (lambda impl: lowered_code(user, impl, target))
    pool = [Candidate(best, ())] + _Enumerator(search, width).alternatives(spec, depth)
    trees, seen, roots, out = set(), set(), {}, []
    for cand in sorted(pool, key=lambda c: (c.cost, len(c.path))):  # stable: the pick stays first
        tree = format_tree(cand.impl)
        if tree in trees:  # the same tree reached twice: cheaper to compare than the code
            continue
        trees.add(tree)
        root = cand.path[0][0] if cand.path else None
        if per_root is not None and root is not None and roots.get(root, 0) >= per_root:
            continue
        k = key(cand.impl)
        if k in seen:
            continue
        seen.add(k)
        roots[root] = roots.get(root, 0) + 1
        out.append(cand)
        if len(out) >= limit:
            break
    return out


def lowered_code(user, impl, target) -> str:
    """The kernel body a program lowers to, without comments: two programs with the same code are one."""
    from morello_build.codegen import runtime_namespace
    from morello_build.codegen.lower import lower

    lines, _ = lower(impl, user, target, runtime_namespace())
    return "\n".join(ln for ln in (s.strip() for s in lines) if ln and not ln.startswith("//"))


def replay(spec: Spec, path: Path, search: Search):
    """The program ``path`` pins for ``spec`` (the rest synthesized); None if it no longer applies."""
    from morello_build.db.encode import action_from_text

    spec = canonicalize(spec)
    if not path:
        return search.best(spec)
    (text, main), rest = path[0], path[1:]
    action = action_from_text(text, spec.op)
    return search.apply(spec, action, bodies={main: lambda sub: replay(sub, rest, search)})


__all__ = ["Candidate", "enumerate_candidates", "lowered_code", "replay"]
