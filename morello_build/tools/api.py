"""The Python entry points the CLI, CMake and the pybind11 bridge share: spec string -> header text."""

from __future__ import annotations

from morello_build.ir.spec import UserSpec, parse_spec
from morello_build.synth.search import synthesize
from morello_build.target import get_target


def synthesize_program(
    spec: str | UserSpec, *, isa: str = "native", threads: int | None = None, db: str | None = None, progress=None
):
    """Parse (if needed) and synthesize for ``threads`` threads (None: this machine's CPUs, see
    target.get_target): returns (user spec, target, impl, search)."""
    user = parse_spec(spec) if isinstance(spec, str) else spec
    target = get_target(isa, threads=threads)
    store = open_store(db, target) if db is not None else None
    try:
        impl, search = synthesize(user.to_spec(target.limits()), target, progress=progress, store=store)
    finally:
        if store is not None:
            store.close()
    return user, target, impl, search


def open_store(db: str, target):
    """The persistent synthesis database (morello_build.db), opened for this target."""
    from morello_build.db import open_db

    return open_db(db, target)


def synthesize_header(
    spec: str | UserSpec,
    *,
    isa: str = "native",
    threads: int | None = None,
    name: str = "kernel",
    namespace: str = "morello",
    db: str | None = None,
    progress=None,
) -> str:
    """The complete generated header for ``spec`` (deterministic bytes)."""
    from morello_build.codegen import emit_header

    user, target, impl, _ = synthesize_program(spec, isa=isa, threads=threads, db=db, progress=progress)
    return emit_header(user, impl, target, name=name, namespace=namespace)
