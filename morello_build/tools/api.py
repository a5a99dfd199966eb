"""The Python entry points the CLI, CMake and the pybind11 bridge share: spec string -> header text."""

from __future__ import annotations

from morello_build.ir import aquant
from morello_build.ir.grammar import UserSpec, parse_spec
from morello_build.synth.search import synthesize
from morello_build.target import DISPATCH_LEVELS, TARGETS, get_target
from morello_build.tools.errors import UserError


def synthesize_program(
    spec: str | UserSpec,
    *,
    isa: str = "native",
    threads: int | None = None,
    db: str | None = None,
    progress=None,
    profile=None,
):
    """Parse (if needed) and synthesize for ``threads`` threads (None: this machine's CPUs, see
    target.get_target), priced by the cost ``profile`` (None: $MORELLO_PROFILE, else this host's; see
    target/profiles.py): returns (user spec, target, impl, search)."""
    user = parse_spec(spec) if isinstance(spec, str) else spec
    target = get_target(header_isa(user, isa), threads=threads, profile=profile)
    store = open_store(db, target) if db is not None else None
    try:
        impl, search = synthesize(user.to_spec(target.limits()), target, progress=progress, store=store)
    finally:
        if store is not None:
            store.close()
    return user, target, impl, search


def synthesize_tuned(
    spec: str | UserSpec,
    tune: int,
    *,
    isa: str = "native",
    threads: int | None = None,
    db: str | None = None,
    progress=None,
    timer=None,
    profile=None,
):
    """``synthesize_program``, then the fastest of the ``tune`` best candidates measured on this host (or
    the choice the DB stored for it: tools/tune.py). Returns (user spec, target, impl, Tuning)."""
    from morello_build.tools import tune as tuning

    user = parse_spec(spec) if isinstance(spec, str) else spec
    target = get_target(header_isa(user, isa), threads=threads, profile=profile)
    store = open_store(db, target) if db is not None else None
    try:
        impl, search = synthesize(user.to_spec(target.limits()), target, progress=progress, store=store)
        kw = {} if timer is None else {"timer": timer}
        impl, result = tuning.tune(user, target, tune, search, db=db, **kw)
    finally:
        if store is not None:
            store.close()
    return user, target, impl, result


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
    profile=None,
    tune: int = 0,
    timer=None,
) -> str:
    """The complete generated header for ``spec`` (deterministic bytes); ``isa="dispatch"``: one header
    with a program per ISA level, chosen at run time (codegen/dispatch.py). ``tune`` K > 0: the fastest of
    the K best candidates measured on this host (tools/tune.py; ``timer`` replaces the measurement)."""
    from morello_build.codegen import emit_header
    from morello_build.tools.tune import check_k

    if check_k(tune):
        if isa == "dispatch":
            raise UserError("--tune measures programs for one ISA; it does not apply to --isa dispatch")
        user, target, impl, result = synthesize_tuned(
            spec, tune, isa=isa, threads=threads, db=db, progress=progress, timer=timer, profile=profile
        )
        return emit_header(user, impl, target, name=name, namespace=namespace, tuning=result.note())
    if isa == "dispatch":
        from morello_build.codegen.dispatch import emit_dispatch_header

        user, variants = synthesize_variants(spec, threads=threads, db=db, progress=progress, profile=profile)
        return emit_dispatch_header(user, variants, name=name, namespace=namespace)
    user, target, impl, _ = synthesize_program(
        spec, isa=isa, threads=threads, db=db, progress=progress, profile=profile
    )
    return emit_header(user, impl, target, name=name, namespace=namespace)


def synthesize_variants(
    spec: str | UserSpec, *, threads: int | None = None, db: str | None = None, progress=None, profile=None
):
    """Runtime dispatch: (user spec, a Variant per level of target.DISPATCH_LEVELS, best first). Each
    level is searched for its own target (for ``threads`` threads), in its own DB store; a level whose search
    would give a lower level's program (search_isa) reuses that program and code."""
    from morello_build.codegen.dispatch import Variant

    user = parse_spec(spec) if isinstance(spec, str) else spec
    programs, variants = {}, []
    for level in DISPATCH_LEVELS:
        isa = search_isa(user, level)
        if isa not in programs:
            programs[isa] = synthesize_program(
                user, isa=isa, threads=threads, db=db, progress=progress, profile=profile
            )
        _, target, impl, _ = programs[isa]
        variants.append(Variant(level, isa, TARGETS[level], target, impl))
    return user, tuple(variants)


# A VNNI level -> the level whose program it repeats but for aquant=i8 (its only kernels beyond that level's).
VNNI_PLAIN = {"avx2_vnni": "avx2", "avx512_vnni": "avx512"}


def search_isa(user: UserSpec, isa: str) -> str:
    """The ISA whose search gives the same program as ``isa``'s: highway's catalog and costs are avx2's; the
    VNNI levels' kernels beyond avx2's or avx512's serve only A quantized to int8 in the kernel (aquant=i8: the
    VNNI dot kernels), and avx512_bf16's beyond avx512_vnni's only A and B both bf16 (dot_bf16_dp)."""
    if isa == "highway":
        return "avx2"
    if isa in VNNI_PLAIN:
        return isa if aquant.is_quantized_a(user.dtypes[0]) else VNNI_PLAIN[isa]
    if isa == "avx512_bf16":
        a, b = user.dtypes[:2]
        return isa if a.value == b.value == "bf16" else search_isa(user, "avx512_vnni")
    return isa


def header_isa(user: UserSpec, isa: str) -> str:
    """The ISA a one-ISA header of ``user`` is built for: ``isa`` (``native`` resolved), but the lower level whose
    program it would only repeat (search_isa): ``avx2`` for ``avx2_vnni`` and ``avx512`` for ``avx512_vnni``
    without aquant=i8, ``avx512_vnni`` or ``avx512`` for ``avx512_bf16`` unless A and B are both bf16. The same
    code then runs on every CPU of that level (a ``native`` build on a Sapphire Rapids or Zen 4 on a Skylake-X
    too), and an avx2 header compiles with GCC 10 / Clang 11, which lack the ``avxvnni`` target attribute."""
    isa = resolve_isa(isa)
    return isa if isa == "highway" else search_isa(user, isa)


def resolve_isa(isa: str) -> str:
    """``isa`` with ``native`` resolved to this machine's ISA; ``dispatch`` as is."""
    return isa if isa == "dispatch" else get_target(isa).isa
