"""Code generation: a synthesized Impl tree -> one header-only C++ file (DESIGN.md, "Generated header").

``emit_header`` renders the op's template (``templates/op_<kind>.hpp.j2``, named by its OpDef in
ir/ops.py), which extends ``templates/header.hpp.j2`` with the op's contract and reference loop, with
- the user's operands, signatures and the reference loop's expressions, from the op's facts, and the
  runtime shared by all headers of this generator version (bf16 helpers, the default thread pool):
  ``header_context``, what a header says whatever program implements it;
- the helper library of the target ISA (``templates/isa_*.hpp.j2``; one vocabulary for every vector ISA),
- the kernel body, lowered from the Impl tree by :mod:`morello_build.codegen.lower`, its threads and
  tree: ``variant_context``, what one program adds.
:mod:`morello_build.codegen.dispatch` renders the same template over ``dispatch.hpp.j2`` with one
header context and a program per ISA level.
Output is a pure function of (spec, program, target, name, namespace): same inputs, same bytes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache
from math import prod
from pathlib import Path

from morello_build import __version__
from morello_build.codegen.lower import CodegenError, lower
from morello_build.ir import aquant
from morello_build.ir.epilogue import TERMS
from morello_build.ir.formats import is_format
from morello_build.ir.grammar import UserSpec, format_spec
from morello_build.ir.impl import Loop, format_tree, walk
from morello_build.ir.layout import NAMED
from morello_build.ir.spec import DType
from morello_build.target import TARGETS

__all__ = [
    "emit_header",
    "header_context",
    "variant_context",
    "helper_library",
    "CodegenError",
    "runtime_namespace",
    "is_cxx_identifier",
]

# Reserved words a generated function or namespace name must not be; MorelloBuildFunctions.cmake reads
# the same file to check NAME and NAMESPACE at configure time.
_PACKAGE = Path(__file__).resolve().parents[1]
CXX_KEYWORDS = frozenset((_PACKAGE / "cmake" / "cxx_keywords.txt").read_text().split())
_TEMPLATES = _PACKAGE / "templates"


def is_cxx_identifier(name: str) -> bool:
    """An ASCII C++ identifier that is not a keyword (str.isidentifier admits both 'class' and 'é')."""
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None and name not in CXX_KEYWORDS


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a generated function or namespace part, or None: not an identifier, or
    reserved to the C++ implementation ([lex.name]: any name with '__', or '_' and a capital)."""
    if not is_cxx_identifier(name):
        return "is not a valid C++ identifier"
    if "__" in name or re.match(r"_[A-Z]", name):
        return "is reserved to the C++ implementation (names with '__' or starting with '_' and a capital)"
    return None


def namespace_problem(namespace: str) -> tuple[str, str] | None:
    """(the offending part, why) if ``namespace`` (``a`` or ``a::b``) cannot hold generated code, else None:
    an empty part, a bad part (name_problem), or a top-level name the standard reserves (std, std1,
    posix, a leading '_')."""
    parts = namespace.split("::")
    if "" in parts:
        return namespace, "has an empty part (write a or a::b)"
    for part in parts:
        why = name_problem(part)
        if why:
            return part, why
    if re.fullmatch(r"std[0-9]*|posix", parts[0]) or parts[0].startswith("_"):
        return namespace, f"is reserved: the top-level namespace '{parts[0]}' belongs to the C++ implementation"
    return None


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


def runtime_header(rt: str) -> str:
    """The runtime every header carries (bf16 helpers, the CPU check, the default pool) in namespace ``rt``."""
    return render("runtime.hpp.j2", rt=rt, rt_guard=rt.upper(), version=__version__)


def render(template: str, **ctx) -> str:
    """A package template (templates/), rendered by the one Jinja environment of the generator."""
    return _env().get_template(template).render(**ctx)


@dataclass(frozen=True)
class _Operand:
    """One parameter of the user's kernel as the header presents it: an operand or an epilogue term."""

    name: str
    ctype: str
    desc: str
    const: bool  # an input
    elems: int  # elements (1 for a scalar)
    dtype: DType = DType.F32
    scalar: bool = False  # passed by value (the epilogue's scale)
    block_bytes: int = 0  # a block format's bytes per block (ir/formats.py)
    block_header: int = 0  # what starts each block: 1 ggml's fp16 scale, 2 gemma's bf16 inv_scale and zeropoint

    def param(self, restrict: str = "") -> str:
        if self.scalar:
            return f"{self.ctype} {self.name}"
        return f"{'const ' if self.const else ''}{self.ctype}*{restrict} {self.name}"

    @property
    def code(self) -> int:
        """For the type-erased entry points (erased.hpp.j2): the element type (ERASED_CODES)."""
        return ERASED_CODES[getattr(self.dtype, "value", self.dtype)]

    @property
    def role(self) -> int:
        """For the type-erased entry points: 0 an input array, 1 the output, 2 a scalar."""
        return 2 if self.scalar else 0 if self.const else 1


# The type-erased element codes: 0 float, 1 bf16 bits, 2 uint8_t bytes, 3 int8_t, 4 f16 bits.
ERASED_CODES = {"f32": 0, "bf16": 1, "uint8_t": 2, "int8_t": 3, "f16": 4, aquant.F32Q8.value: 0}


def _format_operands(user: UserSpec, name: str = "b") -> tuple[_Operand, ...]:
    """B (or the pair's B1, B2) in a weight format (ir/formats.py): its units, scales and zero points."""
    fmt = user.dtypes[1]
    b, k, n = user.batch, user.k, user.n
    stored = fmt.storage_elems(b * k * n)
    desc = f"{fmt.ctype}[{stored}], {fmt} weights: {b * n} columns of K = {k} values (ir/formats.py)"
    header = {"f16": 1, "bf16x2": 2}.get(fmt.header, 0)
    dtype = "f16" if fmt.name == "f16" else fmt.ctype
    out = [_Operand(name, fmt.ctype, desc, True, stored, dtype, False, fmt.unit_size if fmt.block else 0, header)]
    groups = b * n * k // fmt.group
    for suffix, ctype in fmt.extra_arrays():
        what = f"{fmt.scales} scale" if suffix == "scales" else "zero point"
        dt = fmt.scales if suffix == "scales" else ctype
        out.append(
            _Operand(
                f"{name}_{suffix}",
                ctype,
                f"{ctype}[{groups}], the {what} of each group of {fmt.group}"
                f" values along K (column-major: group g of column n at n * {k // fmt.group} + g)",
                True,
                groups,
                dt,
            )
        )
    return tuple(out)


def _operand_desc(dt: DType, layout: str, shape: tuple[int, int, int], dims: tuple[str, ...]) -> str:
    b, r, c = shape
    lay = "row-major" if layout == "row" else "column-major (the last two dims swapped)"
    return f"{dt.ctype}[{b}][{r}][{c}] ({', '.join(dims)}), {dt.value}, {lay}"


def _epilogue_operands(user: UserSpec) -> tuple[_Operand, ...]:
    """The epilogue's terms, after the op's operands, in TERMS order (ir/epilogue.py)."""
    b, m, n = user.batch, user.m, user.n
    sizes = {"scale": 1, "colscale": n, "bias": n, "residual": b * m * n}
    column = f"float[{n}] (n)"
    shapes = {"colscale": column, "bias": column, "residual": f"float[{b}][{m}][{n}] (batch, m, n)"}
    out = []
    if user.epilogue.pair:
        for name in user.epilogue.tensors:
            what = f"the bias of A·B{name[-1]} per output column (N values)"
            out.append(_Operand(name, "float", f"{what}: {column}, f32", True, n, DType.F32))
        return tuple(out)
    for name, _, what in TERMS:
        if getattr(user.epilogue, name):
            desc = f"{what}: " + ("float, by value" if name == "scale" else f"{shapes[name]}, f32, row-major")
            out.append(_Operand(name, "float", desc, True, sizes[name], DType.F32, name == "scale"))
    return tuple(out)


def _operands(user: UserSpec) -> tuple[_Operand, ...]:
    """The kernel's parameters in order: A, B, C, B's scale and zero-point arrays if its format has them
    (ir/formats.py), then the epilogue's terms."""
    if is_format(user.dtypes[1]):  # a, b (b1, b2), c, then b's arrays (b1's, then b2's)
        a, *_, c = _plain_operands(user)
        bs = [_format_operands(user, name) for name in (("b1", "b2") if user.kind == "gated" else ("b",))]
        return (a, *(b[0] for b in bs), c, *(x for b in bs for x in b[1:])) + _epilogue_operands(user)
    return _plain_operands(user) + _epilogue_operands(user)


def _plain_operands(user: UserSpec) -> tuple[_Operand, ...]:
    op = user.definition
    return tuple(
        _Operand(
            name, dt.ctype, _operand_desc(dt, lay, shape, op.operand_dim_names(i)), i not in op.outputs, prod(shape), dt
        )
        for i, (name, dt, lay, shape) in enumerate(
            zip(op.operand_names, user.operand_dtypes(), user.operand_layouts(), user.operand_shapes())
        )
    )


def _epilogue_context(user: UserSpec, index_c: str, rt: str) -> dict:
    """The epilogue as the header says it: the formula of the contract comment, and the reference loop's
    statements applying it to its f32 ``acc`` (C is row-major, so the residual shares C's index)."""
    e = user.epilogue
    acts = [f"{e.act}(x) = {e.activation.doc}"] if e.act else []
    if e.pair:
        bias = (" + bias1[n]", " + bias2[n]") if e.bias else ("", "")
        y = f"{e.act}(sum_k A[b,m,k] * B1[b,k,n]{bias[0]}) * (sum_k A[b,m,k] * B2[b,k,n]{bias[1]})"
        gate = e.activation.cxx.format(y="g")
        return {
            "epilogue": e.describe(),
            "epilogue_formula": y,
            "epilogue_lines": [],
            "epilogue_acts": acts,
            "gate": gate,
        }
    y, lines = "sum_k A[b,m,k] * B[b,k,n]", []
    if e.scale or e.colscale:
        factors = ["scale"] * e.scale + ["colscale[n]"] * e.colscale
        y = " * ".join(factors + [y])
        lines += ["acc = acc * scale;"] * e.scale + ["acc = acc * colscale[j];"] * e.colscale
    if e.bias:
        y, _ = f"{y} + bias[n]", lines.append("acc = acc + bias[j];")
    if e.act:
        y, _ = f"{e.act}({y})", lines.append(f"acc = {e.activation.cxx.format(y='acc')};")
    if e.residual:
        y, _ = f"{y} + residual[b,m,n]", lines.append(f"acc = acc + residual[{index_c}];")
    return {"epilogue": e.describe(), "epilogue_formula": y, "epilogue_lines": lines, "epilogue_acts": acts}


_WEIGHT_VALUES = {
    "f16": "the IEEE half",
    "e4m3": "the OCP FP8 E4M3FN value",
    "sfp": "the gemma.cpp SFP value (|v| <= 1.875)",
    "q8_0": "ggml block_q8_0: d * q",
    "q4_0": "ggml block_q4_0: d * (nibble - 8)",
    "gemma_i8": "gemma.cpp I8Stream: inv_scale * q + (-zeropoint * inv_scale)",
    "i8": "(q - zero point) * group scale",
    "i4": "(nibble - zero point, or 8) * group scale",
}


def _reference_context(user: UserSpec, rt: str) -> dict:
    """What an op's reference loop (its header template) needs: each iteration dim's extent, and per
    operand its element's offset from the loop variables, its load widened to f32, and the store of an
    f32 ``acc`` into it."""
    op = user.definition
    index, load, store = {}, {}, {}
    for name, dt, lay, shape, dims in zip(
        op.operand_names, user.operand_dtypes(), user.operand_layouts(), user.operand_shapes(), op.operand_iter_dims
    ):
        index[name] = NAMED[lay].c_offset(tuple(op.cxx_vars[j] for j in dims), shape)
        element = f"{name}[{index[name]}]"
        if is_format(dt):
            load[name] = dt.cxx_deq(rt, name, index[name])
            continue
        bf16 = dt == DType.BF16
        load[name] = f"::{rt}::bf16_to_f32({element})" if bf16 else element
        store[name] = f"::{rt}::f32_to_bf16(acc)" if bf16 else "acc"
    fmt = user.dtypes[1] if is_format(user.dtypes[1]) else None
    return {
        "aquant": aquant.is_quantized_a(user.dtypes[0]),
        "weight_format": fmt and fmt.value,
        "weight_value": fmt and _WEIGHT_VALUES.get(fmt.name),
        "extent": dict(zip(op.iter_names, user.iter_shape)),
        "index": index,
        "load": load,
        "store": store,
        **_epilogue_context(user, index["c"], rt),
    }


def _b_values(user: UserSpec, operands: tuple[_Operand, ...], rt: str) -> list[dict]:
    """NAME_b_value's cases (erased.hpp.j2), per B operand (b; b1, b2): the arrays it reads (index in the
    type-erased args, C type) and the f32 value of its element at offset ``off`` in its layout, dequantized
    as the reference loop does (a test program's tolerance needs the values, not a format's bytes)."""
    op = user.definition
    at = {o.name: i for i, o in enumerate(operands)}
    cases = []
    for name, dt in zip(op.operand_names[1:-1], user.operand_dtypes()[1:-1]):
        arrays = [(o.name, o.ctype, at[o.name]) for o in operands if o.name == name or o.name.startswith(name + "_")]
        if is_format(dt):
            value = dt.cxx_deq(rt, name, "off")
        else:
            value = f"::{rt}::bf16_to_f32({name}[off])" if dt == DType.BF16 else f"{name}[off]"
        cases.append({"arrays": arrays, "value": value})
    return cases


def _parallel_tasks(impl) -> int | None:
    """Tasks of the program's parallel loop (None: no parallel loop)."""
    return next((sum(r.count for r in n.regions) for n in walk(impl) if isinstance(n, Loop) and n.parallel), None)


def helper_library(helpers: str) -> str:
    """The ISA helper library ``templates/isa_<helpers>.hpp.j2`` (guarded: several can share a TU)."""
    rt = runtime_namespace()
    return render(
        f"isa_{helpers}.hpp.j2",
        rt=rt,
        rt_guard=rt.upper(),
        avx2_attr=TARGETS["avx2"].target_attr,
        avx512_attr=TARGETS["avx512"].target_attr,
        hwy_attr=TARGETS["highway"].target_attr,
    ).rstrip("\n")


def header_context(user: UserSpec, *, name: str, namespace: str) -> dict:
    """What a header says whatever program implements it: the spec, operands, signatures, reference
    loop, runtime and include guard."""
    rt = runtime_namespace()
    operands = _operands(user)
    names = [o.name for o in operands]
    arrays = [o.name for o in operands if not o.scalar]
    guard = "MORELLO_GEN_" + re.sub(r"[^0-9A-Za-z]", "_", f"{namespace}_{name}").upper() + "_HPP"
    return dict(
        qualified=f"{namespace}::{name}",
        name=name,
        namespace=namespace,
        version=__version__,
        spec=format_spec(user),
        accum=user.accum,
        operands=operands,
        no_overlap=", ".join(arrays[:-1]) + " and " + arrays[-1],
        dims_decl=", ".join(f"{d} = {e}" for d, e in zip(user.definition.iter_names, user.iter_shape)),
        params=", ".join(o.param() for o in operands),
        restrict_params=", ".join(o.param(" __restrict") for o in operands),
        args=", ".join(names),
        b_values=_b_values(user, operands, rt),
        **_reference_context(user, rt),
        cost_units="cost-model units, about cycles on one core",
        guard=guard,
        runtime=runtime_header(rt).rstrip("\n"),
        rt=rt,
    )


def variant_context(user: UserSpec, impl, target, *, name: str) -> dict:
    """What one program on one target contributes: its lowered body, threads, notes and tree."""
    rt = runtime_namespace()
    body, parallel = lower(impl, user, target, rt)
    args = ", ".join(o.name for o in _operands(user))
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
            "the CPUs the process may use, overridden by the environment\n// variable "
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
    return dict(
        isa=target.isa,
        profile=f"{target.profile} (cost table {target.cost_fingerprint})",
        threads=target.threads,
        target_attr=target.target_attr,
        dp_note=dp_note,
        threads_doc=threads_doc,
        default_doc=default_doc,
        tasks=tasks,
        tasks_doc=f"{tasks} tasks, one per output tile" if parallel else "",
        tree=format_tree(impl).splitlines(),
        helpers=target.helpers,
        cpu_check=target.cpu_check,
        compiler_check=target.compiler_check,
        compiler_needed=target.compiler_needed,
        fn_attr=(target.attr + "\n") if target.attr else "",
        parallel=parallel,
        body=body,
    )


def emit_header(
    user: UserSpec, impl, target, *, name: str = "kernel", namespace: str = "morello", tuning: str | None = None
) -> str:
    """The complete header for ``user`` implemented by ``impl`` on ``target`` (deterministic bytes);
    ``tuning``: a line saying how the program was chosen by measurement (``synth --tune``), if it was."""
    return render(
        user.definition.header_template,
        base="header.hpp.j2",
        **header_context(user, name=name, namespace=namespace),
        **variant_context(user, impl, target, name=name),
        helper_libs=[helper_library(target.helpers)] if target.helpers else [],
        tuning=tuning,
    )
