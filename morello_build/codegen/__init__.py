"""Code generation: a synthesized Impl tree -> one header-only C++ file (DESIGN.md, "Generated header").

``emit_header`` renders ``templates/header.hpp.j2`` with
- the runtime shared by all headers of this generator version (bf16 helpers, the default thread pool),
- the helper library of the target ISA (``templates/isa_*.hpp.j2``; one vocabulary for every vector ISA),
- the kernel body, lowered from the Impl tree by :mod:`morello_build.codegen.lower`.
Output is a pure function of (spec, program, target, name, namespace): same inputs, same bytes.
"""
from __future__ import annotations

import hashlib
import re
from functools import cache
from pathlib import Path

from morello_build import __version__
from morello_build.codegen.isa import ISAS, IsaInfo, isa_info
from morello_build.codegen.lower import CodegenError, lower
from morello_build.ir.impl import Loop, format_tree, walk
from morello_build.ir.layout import NAMED
from morello_build.ir.spec import DType, UserSpec, format_spec

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


def _render(template: str, **ctx) -> str:
    return _env().get_template(template).render(**ctx)


def _operand_desc(name: str, dt: DType, layout: str, shape: tuple[int, int, int], dims: str) -> str:
    b, r, c = shape
    lay = "row-major" if layout == "row" else "column-major (the last two dims swapped)"
    return f"{dt.ctype}[{b}][{r}][{c}] ({dims}), {dt.value}, {lay}"


def _parallel_tasks(impl) -> int | None:
    """Tasks of the program's parallel loop (None: no parallel loop)."""
    return next((sum(r.count for r in n.regions) for n in walk(impl) if isinstance(n, Loop) and n.parallel), None)


def emit_header(user: UserSpec, impl, target, *, name: str = "kernel", namespace: str = "morello") -> str:
    """The complete header for ``user`` implemented by ``impl`` on ``target`` (deterministic bytes)."""
    info: IsaInfo = isa_info(target)
    rt = runtime_namespace()
    rt_guard = rt.upper()
    spec = format_spec(user)
    body, parallel = lower(impl, user, target, info, rt)

    shapes = ((user.batch, user.m, user.k), (user.batch, user.k, user.n), (user.batch, user.m, user.n))
    names = (("bb", "i", "p"), ("bb", "p", "j"), ("bb", "i", "j"))
    idx = [NAMED[lay].c_offset(n, s) for lay, n, s in zip(user.layouts, names, shapes)]
    a_t, b_t, c_t = (d.ctype for d in user.dtypes)

    def widen(dt: DType, e: str) -> str:
        return f"::{rt}::bf16_to_f32({e})" if dt == DType.BF16 else e

    c_dt = user.dtypes[2]
    ref_init = widen(c_dt, f"c[{idx[2]}]") if user.accum else "0.0f"
    ref_store = f"::{rt}::f32_to_bf16(acc)" if c_dt == DType.BF16 else "acc"

    helper_libs = []
    if info.helpers:
        helper_libs.append(_render(
            f"isa_{info.helpers}.hpp.j2", rt=rt, rt_guard=rt_guard,
            avx2_attr=ISAS["avx2"].target_attr, avx512_attr=ISAS["avx512"].target_attr,
            hwy_attr=ISAS["highway"].target_attr,
        ).rstrip("\n"))

    tasks = _parallel_tasks(impl) if parallel else None
    if parallel:
        threads_doc = (f"the program has a parallel loop of {tasks} tasks. {name}(a, b, c) runs them on a "
                       "persistent std::thread pool\n// (MORELLO_NUM_THREADS overrides its size); "
                       f"{name}(a, b, c, pf) hands them to your parallel-for.")
        default_doc = ("the tasks run on a persistent std::thread pool\n// (function-local static, sized to "
                       "std::thread::hardware_concurrency(), overridden by the environment\n// variable "
                       "MORELLO_NUM_THREADS; the calling thread works too).")
    else:
        threads_doc = f"the program is serial: {name}(a, b, c) runs on the calling thread."
        default_doc = "the program is serial and runs on the calling thread."
    dp_note = None
    if any(ln.strip().startswith("//") is False and "dp_bf16(" in ln for ln in body):
        dp_note = ("vdpbf16ps (dot_bf16_dp) adds pairs of exact bf16 products and treats subnormal inputs"
                   " and outputs as zero.")

    tree = format_tree(impl).splitlines()
    guard = "MORELLO_GEN_" + re.sub(r"[^0-9A-Za-z]", "_", f"{namespace}_{name}").upper() + "_HPP"
    return _render(
        "header.hpp.j2",
        qualified=f"{namespace}::{name}", name=name, namespace=namespace, version=__version__, spec=spec,
        isa=target.isa, target_attr=info.target_attr, accum=user.accum, batch=user.batch, m=user.m,
        k=user.k, n=user.n,
        a_desc=_operand_desc("a", user.dtypes[0], user.layouts[0], shapes[0], "batch, m, k"),
        b_desc=_operand_desc("b", user.dtypes[1], user.layouts[1], shapes[1], "batch, k, n"),
        c_desc=_operand_desc("c", user.dtypes[2], user.layouts[2], shapes[2], "batch, m, n"),
        dp_note=dp_note, threads_doc=threads_doc, default_doc=default_doc,
        tasks_doc=f"{tasks} tasks, one per output tile" if parallel else "",
        cost_units="cost-model units, about cycles on one core", tree=tree, guard=guard,
        runtime=_render("runtime.hpp.j2", rt=rt, rt_guard=rt_guard, version=__version__).rstrip("\n"),
        helper_libs=helper_libs, helpers=info.helpers, rt=rt,
        a_type=a_t, b_type=b_t, c_type=c_t,
        ref_init=ref_init, ref_a=widen(user.dtypes[0], f"a[{idx[0]}]"),
        ref_b=widen(user.dtypes[1], f"b[{idx[1]}]"), ref_c_index=idx[2], ref_store=ref_store,
        cpu_features=info.cpu_features,
        fn_attr=(info.attr + "\n") if info.attr else "",
        parallel=parallel, body=body,
    )
