"""Runtime ISA dispatch: one header holding a program per ISA level (``target.DISPATCH_LEVELS``), each
synthesized for its own target, and an entry point that runs the best level the CPU supports.

The header is the op's template over ``templates/dispatch.hpp.j2`` (the skeleton with one program is
``header.hpp.j2``): the spec, operands, reference loop and runtime are rendered once
(:func:`header_context`), each distinct program once into its own namespace ``NAME_detail::<isa>``
(:func:`variant_context`, ``templates/variant_run.hpp.j2``). Levels whose search gives a lower level's
program (the caller decides; see ``tools/api.py``) run that level's code.
"""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.codegen import header_context, helper_library, render, variant_context
from morello_build.ir.grammar import UserSpec


@dataclass(frozen=True)
class Variant:
    """One ISA level of a dispatch header and the program it runs."""

    level: str  # the level's ISA (a value of MORELLO_ISA)
    code: str  # the ISA whose program and code it runs: ``level``, or a lower one with the same program
    target: object  # the level's Target (its run-time CPU check)
    code_target: object  # the Target ``impl`` was synthesized for
    impl: object


def emit_dispatch_header(
    user: UserSpec, variants: tuple[Variant, ...], *, name: str = "kernel", namespace: str = "morello"
) -> str:
    """The dispatch header for ``user``: ``variants`` best first, the last one supported by every CPU."""
    if variants[-1].target.cpu_features:
        raise ValueError("the last variant of a dispatch header must run on any CPU")
    codes = {}
    for v in variants:
        if v.code not in codes:
            codes[v.code] = variant_context(user, v.impl, v.code_target, name=name)
    helper_libs = dict.fromkeys(c["helpers"] for c in codes.values() if c["helpers"])
    dp_levels = [v.level for v in variants if codes[v.code]["dp_note"]]
    dp_note = None
    if dp_levels:
        dp_note = (
            f"The loosest variant is {' and '.join(dp_levels)}: "
            + codes[next(v.code for v in variants if v.level == dp_levels[0])]["dp_note"]
            + "\n// Away from subnormals it keeps the bound above (bf16 products are exact in f32)."
        )
    return render(
        user.definition.header_template,
        base="dispatch.hpp.j2",
        **header_context(user, name=name, namespace=namespace),
        isa="dispatch",
        levels=[dict(level=v.level, code=v.code, cpu_check=v.target.cpu_check) for v in variants],
        codes=codes,
        dp_note=dp_note,
        profile=codes[variants[0].code]["profile"],
        helper_libs=[helper_library(h) for h in helper_libs],
    )
