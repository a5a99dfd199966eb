"""One search per target in a test process, for the tests that synthesize with the catalog and actions as they are.

Neighbouring specs share sub-programs, so one memo serves them all (as cpp_tests/gen_tests.py and a build's
synthesis DB do: seven matrix specs in a row on avx512 searched in 27 s instead of 36), and an ISA whose
program is another's (tools.api.search_isa: highway's is avx2's, avx512_bf16's mostly avx512's) reuses it
instead of searching again. Tests that patch the catalog (without_kernels) or the actions search afresh
(new_search, search.synthesize).
"""

from __future__ import annotations

import sys

from morello_build.synth.search import Search
from morello_build.target import get_target
from morello_build.tools.api import search_isa

_SEARCHES: dict = {}


def search_for(target) -> Search:
    """This process's search for ``target`` (its memo kept for the rest of the run)."""
    if target not in _SEARCHES:
        _SEARCHES[target] = new_search(target)
    return _SEARCHES[target]


def new_search(target) -> Search:
    """A search of its own, for a test that patches the catalog: one memo for the specs it synthesizes then."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 20000))  # as search.synthesize does
    return Search(target)


def without_kernels(names, monkeypatch, request) -> None:
    """The kernel catalog without ``names`` for this test. The search's kernel actions are cached per target and
    per op (synth/actions/policy.py): cleared before and after, so no other search sees this catalog's. Search
    with new_search (the shared searches' memos hold the whole catalog's programs)."""
    from morello_build.synth.actions import policy
    from morello_build.target import kernels as catalog

    monkeypatch.setattr(catalog, "CATALOG", tuple(k for k in catalog.CATALOG if k.name not in names))
    for cached in (policy._selects, policy._offered):
        cached.cache_clear()
        request.addfinalizer(cached.cache_clear)


def program(user, target):
    """The best program of ``user`` (a UserSpec) for ``target``, from the search of the ISA that gives the same
    program (when ``target`` is that ISA's own record, as get_target gives it)."""
    own = search_isa(user, target.isa)
    if own != target.isa and target == get_target(target.isa, threads=target.threads):
        target = get_target(own, threads=target.threads)
    impl = search_for(target).best(user.to_spec(target.limits()))
    assert impl is not None, f"no program for {user} on {target.isa}"
    return impl
