"""Code generation: a synthesized Impl tree -> one header-only C++ file (DESIGN.md, "Generated header").

``emit_header`` renders the op's template (``templates/op_<kind>.hpp.j2``, named by its OpDef in
ir/ops.py), which extends ``templates/header.hpp.j2`` with the op's contract and reference loop, with
- the user's operands, signatures and the reference loop's expressions, from the op's facts,
- the runtime shared by all headers of this generator version (bf16 helpers, the default thread pool),
- the helper library of the target ISA (``templates/isa_*.hpp.j2``; one vocabulary for every vector ISA),
- the kernel body, lowered from the Impl tree by :mod:`morello_build.codegen.lower`.
Output is a pure function of (spec, program, target, name, namespace): same inputs, same bytes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from morello_build import __version__
from morello_build.codegen.lower import CodegenError, lower
from morello_build.ir.impl import Loop, format_tree, walk
from morello_build.ir.layout import NAMED
from morello_build.ir.spec import DType, UserSpec, format_spec
from morello_build.target import TARGETS

__all__ = ["emit_header", "CodegenError", "runtime_namespace", "is_cxx_identifier"]

# Reserved words a generated function or namespace name must not be; MorelloBuildFunctions.cmake reads
# the same file to check NAME and NAMESPACE at configure time.
_PACKAGE = Path(__file__).resolve().parents[1]
CXX_KEYWORDS = frozenset((_PACKAGE / "cmake" / "cxx_keywords.txt").read_text().split())
_TEMPLATES = _PACKAGE / "templates"


def is_cxx_identifier(name: str) -> bool:
    """An ASCII C++ identifier that is not a keyword (str.isidentifier admits both 'class' and 'é')."""
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None and name not in CXX_KEYWORDS


@cache
def runtime_namespace() -> str:
    """Shared by the headers of one generator version and runtime: the digest of the runtime and ISA
    helper templates keeps headers from builds with different runtimes apart (one ODR definition each)."""
    digest = hashlib.sha256()
    for name in sorted(p.name for p in _TEMPLATES.iterdir() if p.name.startswith(("runtime", "isa_"))):
        digest.update((_TEMPLATES / name).read_bytes())
    return f"morello_rt_v{re.sub(r'[^0-9A-Za-z]', '_', __version__)}_{digest.hexdigest()[:8]}"


@cache
def _env():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.PackageLoader("morello_build", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(template: str, **ctx) -> str:
    """A package template (templates/), rendered by the one Jinja environment of the generator."""
    return _env().get_template(template).render(**ctx)


@dataclass(frozen=True)
class _Operand:
    """One operand of the user's op as the header presents it."""

    name: str
    ctype: str
    desc: str
    const: bool  # an input

    def param(self, restrict: str = "") -> str:
        return f"{'const ' if self.const else ''}{self.ctype}*{restrict} {self.name}"


def _operand_desc(dt: DType, layout: str, shape: tuple[int, int, int], dims: tuple[str, ...]) -> str:
    b, r, c = shape
    lay = "row-major" if layout == "row" else "column-major (the last two dims swapped)"
    return f"{dt.ctype}[{b}][{r}][{c}] ({', '.join(dims)}), {dt.value}, {lay}"


def _operands(user: UserSpec) -> tuple[_Operand, ...]:
    op = user.definition
    return tuple(
        _Operand(name, dt.ctype, _operand_desc(dt, lay, shape, op.operand_dim_names(i)), i not in op.outputs)
        for i, (name, dt, lay, shape) in enumerate(
            zip(op.operand_names, user.dtypes, user.layouts, user.operand_shapes())
        )
    )


def _reference_context(user: UserSpec, rt: str) -> dict:
    """What an op's reference loop (its header template) needs: each iteration dim's extent, and per
    operand its element's offset from the loop variables, its load widened to f32, and the store of an
    f32 ``acc`` into it."""
    op = user.definition
    index, load, store = {}, {}, {}
    for name, dt, lay, shape, dims in zip(
        op.operand_names, user.dtypes, user.layouts, user.operand_shapes(), op.operand_iter_dims
    ):
        index[name] = NAMED[lay].c_offset(tuple(op.cxx_vars[j] for j in dims), shape)
        element = f"{name}[{index[name]}]"
        bf16 = dt == DType.BF16
        load[name] = f"::{rt}::bf16_to_f32({element})" if bf16 else element
        store[name] = f"::{rt}::f32_to_bf16(acc)" if bf16 else "acc"
    return {"extent": dict(zip(op.iter_names, user.iter_shape)), "index": index, "load": load, "store": store}


def _parallel_tasks(impl) -> int | None:
    """Tasks of the program's parallel loop (None: no parallel loop)."""
    return next((sum(r.count for r in n.regions) for n in walk(impl) if isinstance(n, Loop) and n.parallel), None)


def emit_header(user: UserSpec, impl, target, *, name: str = "kernel", namespace: str = "morello") -> str:
    """The complete header for ``user`` implemented by ``impl`` on ``target`` (deterministic bytes)."""
    rt = runtime_namespace()
    rt_guard = rt.upper()
    spec = format_spec(user)
    body, parallel = lower(impl, user, target, rt)

    operands = _operands(user)
    names = [o.name for o in operands]
    args = ", ".join(names)

    helper_libs = []
    if target.helpers:
        helper_libs.append(
            render(
                f"isa_{target.helpers}.hpp.j2",
                rt=rt,
                rt_guard=rt_guard,
                avx2_attr=TARGETS["avx2"].target_attr,
                avx512_attr=TARGETS["avx512"].target_attr,
                hwy_attr=TARGETS["highway"].target_attr,
            ).rstrip("\n")
        )

    tasks = _parallel_tasks(impl) if parallel else None
    if parallel:
        threads_doc = (
            f"synthesized for {target.threads} threads; the program has a parallel loop of {tasks} tasks.\n"
            f"// {name}({args}) runs them on a "
            "persistent std::thread pool\n// (MORELLO_NUM_THREADS overrides its size); "
            f"{name}({args}, pf) hands them to your parallel-for."
        )
        default_doc = (
            "the tasks run on a persistent std::thread pool\n// (function-local static, sized to "
            "std::thread::hardware_concurrency(), overridden by the environment\n// variable "
            "MORELLO_NUM_THREADS; the calling thread works too)."
        )
    else:
        threads_doc = (
            f"synthesized for {target.threads} threads; the program is serial: {name}({args}) runs on the "
            "calling thread."
        )
        default_doc = "the program is serial and runs on the calling thread."
    dp_note = None
    if any(ln.strip().startswith("//") is False and "dp_bf16(" in ln for ln in body):
        dp_note = (
            "vdpbf16ps (dot_bf16_dp) adds pairs of exact bf16 products and treats subnormal inputs and outputs as zero."
        )

    tree = format_tree(impl).splitlines()
    guard = "MORELLO_GEN_" + re.sub(r"[^0-9A-Za-z]", "_", f"{namespace}_{name}").upper() + "_HPP"
    return render(
        user.definition.header_template,
        qualified=f"{namespace}::{name}",
        name=name,
        namespace=namespace,
        version=__version__,
        spec=spec,
        isa=target.isa,
        threads=target.threads,
        target_attr=target.target_attr,
        accum=user.accum,
        operands=operands,
        no_overlap=", ".join(names[:-1]) + " and " + names[-1],
        dims_decl=", ".join(f"{d} = {e}" for d, e in zip(user.definition.iter_names, user.iter_shape)),
        params=", ".join(o.param() for o in operands),
        restrict_params=", ".join(o.param(" __restrict") for o in operands),
        args=args,
        **_reference_context(user, rt),
        dp_note=dp_note,
        threads_doc=threads_doc,
        default_doc=default_doc,
        tasks_doc=f"{tasks} tasks, one per output tile" if parallel else "",
        cost_units="cost-model units, about cycles on one core",
        tree=tree,
        guard=guard,
        runtime=render("runtime.hpp.j2", rt=rt, rt_guard=rt_guard, version=__version__).rstrip("\n"),
        helper_libs=helper_libs,
        helpers=target.helpers,
        rt=rt,
        cpu_features=target.cpu_features,
        fn_attr=(target.attr + "\n") if target.attr else "",
        parallel=parallel,
        body=body,
    )
