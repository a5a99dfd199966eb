"""The Python callable around one compiled kernel (``morello_build.tools.pyapi`` builds it): argument
checks in Python (types, shapes, dtypes, with messages naming the argument), the call in C++.

The kernel's parameters come from the header's table (``NAME_param``: name, dtype, elements, role), so
one wrapper serves every op and epilogue: the input arrays before the output are positional (``a, b``),
the output is ``out=``, and the parameters after it (the epilogue's terms: ``scale``, ``colscale``,
``bias``, ``residual``, ...) are keyword arguments named as in the header.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Real
from pathlib import Path

import numpy as np


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


_U16 = np.dtype(np.uint16)
_F32 = np.dtype(np.float32)
_INPUT, _OUTPUT, _SCALAR = 0, 1, 2  # NAME_param(i).role
# Random values for a term (random_terms): the scale a fixed value, colscale around 1.
_SCALE = 0.75
_COLSCALE_RANGE = (0.5, 1.5)


def _numpy_dtypes(dtype: str, bf16) -> tuple:
    """The numpy dtypes an array of the header's ``dtype`` may have (the first: what outputs get)."""
    if dtype == "f32":
        return (_F32,)
    if dtype == "u8":
        import ml_dtypes

        return (np.dtype(np.uint8), np.dtype(ml_dtypes.float8_e4m3fn))
    if dtype == "i8":
        return (np.dtype(np.int8),)
    if dtype == "f16":
        return (np.dtype(np.float16), _U16)
    return (bf16, _U16)


@dataclass(frozen=True)
class Param:
    """One kernel parameter, in the kernel's order: ``shape`` is the numpy shape as stored (None for a
    float passed by value); ``role`` 0 input array, 1 output array, 2 float by value."""

    name: str
    dtype: str  # "f32", "bf16", or for weight formats' arrays "u8", "i8", "f16" (ir/formats.py)
    shape: tuple[int, ...] | None
    role: int
    term: bool  # after the output: an epilogue term, a keyword argument

    @property
    def arg(self) -> str:
        """The Python argument's name (the output is ``out``)."""
        return "out" if self.role == _OUTPUT else self.name


def _layouts(spec: str) -> tuple[str, ...]:
    """The layout of each op operand: the spec's a=/b=/c= (one token may describe several operands, as
    b= describes b1 and b2: then by the operand name's first letter)."""
    from morello_build.ir.grammar import parse_spec

    user = parse_spec(spec)
    return tuple(user.operand_layouts())


def _stored_shapes(spec: str) -> tuple[dict[str, tuple[int, ...]], dict[str, int], tuple[int, ...]]:
    """(numpy shape of each op operand as stored, the iteration extents by name, C's row-major shape)."""
    from morello_build.ir.grammar import parse_spec

    user = parse_spec(spec)
    op = user.definition
    dims = dict(zip(op.iter_names, user.iter_shape))
    lead = lambda s: s if dims.get("batch", 1) > 1 else s[1:]  # noqa: E731 (a leading batch dim if any)
    shapes = {
        name: lead(s if lay == "row" else (s[0], s[2], s[1]))
        for name, lay, s in zip(op.operand_names, _layouts(spec), user.operand_shapes())
    }
    c = user.operand_shapes()[op.outputs[0]]
    return shapes, dims, lead(c)


def _params(info: dict) -> tuple[Param, ...]:
    """The header's parameter table with numpy shapes: op operands as stored (spec layouts), the
    residual C-shaped (row-major), other terms 1-D (colscale, bias: N values)."""
    shapes, _, c_shape = _stored_shapes(info["spec"])
    out, after_output = [], False
    for name, dtype, elems, role in info["params"]:
        shape = None
        if role != _SCALAR:
            shape = shapes.get(name) or (c_shape if name == "residual" else (elems,))
            weights = name.rsplit("_", 1)[0]  # b, or the gated pair's b1 / b2
            if name.endswith(("_scales", "_zeros")) and weights in shapes:  # a format's scales or zero points
                shape = shapes[weights][:-1] + (elems // int(np.prod(shapes[weights][:-1])),)  # per column
            elif name in ("b", "b1", "b2") and int(np.prod(shape)) != elems:  # a format's bytes: per column
                shape = shape[:-1] + (elems // int(np.prod(shape[:-1])),)
            if int(np.prod(shape)) != elems:
                shape = (elems,)
        out.append(Param(name, dtype, shape, role, after_output))
        after_output = after_output or role == _OUTPUT
    return tuple(out)


class Kernel:
    """A compiled kernel: ``f(a, b)`` returns C, ``f(a, b, out=c)`` writes C in place (required for
    ``accum``); an epilogue's terms are keyword arguments, e.g. ``f(a, b, bias=..., residual=...)``.

    Attributes: ``spec`` (canonical spec string), ``epilogue`` (its terms, "" for none), ``name``,
    ``namespace``, ``header_path`` (the generated header in the cache), ``extension_path``,
    ``batch, m, k, n``, ``accum``, ``dtypes`` (of the op's operands, e.g. ``("f32", "bf16", "f32")``),
    ``layouts``, ``shapes`` (the numpy shapes of the op's operands a, b, c as stored), ``params`` (every
    kernel parameter, a ``Param`` each), ``terms`` (the keyword arguments' names), ``supported`` (whether
    this CPU has the ISA features the kernel uses).
    """

    def __init__(self, module, index: int, header_path: Path, extension_path: Path):
        info = module.info(index)
        self._module, self._index, self._call = module, index, module.call
        self.name: str = info["name"]
        self.namespace: str = info["namespace"]
        self.spec: str = info["spec"]
        self.epilogue: str = info["epilogue"]
        self.accum: bool = info["accum"]
        _, dims, _ = _stored_shapes(self.spec)
        self.batch, self.m, self.k, self.n = (dims.get(d, 1) for d in ("batch", "m", "k", "n"))
        self.params: tuple[Param, ...] = _params(info)
        operands = [p for p in self.params if not p.term]
        self.dtypes: tuple[str, ...] = tuple(p.dtype for p in operands)
        self.layouts: tuple[str, ...] = _layouts(self.spec)
        self.shapes = tuple(p.shape for p in operands)
        self.terms: tuple[str, ...] = tuple(p.name for p in self.params if p.term)
        self.header_path = Path(header_path)
        self.extension_path = Path(extension_path)
        self.supported: bool = bool(module.supported(index))
        bf16 = _bf16()
        self._np_dtype = {p.name: _numpy_dtypes(p.dtype, bf16)[0] for p in self.params}
        # The numpy dtypes accepted for each array: bf16 and f16 also as uint16 holding the bits.
        self._accepted = {p.name: _numpy_dtypes(p.dtype, bf16) for p in self.params}
        self._inputs = tuple(p.name for p in operands if p.role == _INPUT)  # positional
        self._keywords = frozenset(self.terms) | set(self._inputs)

    # -- argument checks -------------------------------------------------------------------------
    def _usage(self) -> str:
        terms = "".join(f", {t}=" for t in self.terms)
        return f"call f({', '.join(self._inputs)}[, out=]{terms}); spec: {self.spec}"

    def _check(self, p: Param, x) -> None:
        """Raise the friendly error for a bad argument (TypeError for the type or dtype, else ValueError)."""
        what, write = p.arg, p.role == _OUTPUT
        if p.role == _SCALAR:
            if isinstance(x, Real) and not isinstance(x, bool):
                return
            raise TypeError(f"{what}: expected a float, got {type(x).__name__} (spec: {self.spec})")
        shape, want = p.shape, self._np_dtype[p.name]
        bits = " (or uint16 bits)" if _U16 in self._accepted[p.name] else ""
        wanted = f"{shape} {want.name}{bits} C-contiguous" + (" writeable" if write else "")
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{what}: expected a numpy array of shape {wanted}, got {type(x).__name__}")
        ok_dtype = x.dtype in self._accepted[p.name]
        flags = x.flags
        if ok_dtype and x.shape == shape and flags.c_contiguous and flags.aligned and (flags.writeable or not write):
            return
        got = f"{x.shape} {x.dtype.name}"
        if not flags.c_contiguous:
            got += " non-contiguous"
        elif not flags.aligned:
            got += " misaligned"
        if write and not flags.writeable:
            got += " read-only"
        raise (ValueError if ok_dtype else TypeError)(f"{what}: expected shape {wanted}, got {got} (spec: {self.spec})")

    def _bind(self, args: tuple, out, kwargs: dict) -> dict:
        """Argument name -> value: inputs positional (or by name), ``out``, the terms by name."""
        if len(args) == len(self._inputs) + 1 and out is None:  # f(a, b, c): out positional, as f(a, b, out=c)
            args, out = args[:-1], args[-1]
        if len(args) > len(self._inputs):
            most = len(self._inputs) + 1
            raise TypeError(f"expected at most {most} positional arguments, got {len(args)}; {self._usage()}")
        values = dict(zip(self._inputs, args))
        for name, x in kwargs.items():
            if name not in self._keywords:
                raise TypeError(f"{name}: unexpected argument; {self._usage()}")
            if name in values:
                raise TypeError(f"{name}: given twice; {self._usage()}")
            values[name] = x
        missing = [n for n in (*self._inputs, *self.terms) if n not in values]
        if missing:
            raise TypeError(f"{missing[0]}: required argument missing; {self._usage()}")
        values["out"] = out
        return values

    def _run(self, which: int, args: tuple, out, kwargs: dict):
        values = self._bind(args, out, kwargs)
        # Fast path: type, shape and dtype here; sizes, contiguity, alignment, writeability and overlap are
        # checked in C++ (cheaply); on any problem, _check explains it in terms of the argument.
        ordered = []
        for p in self.params:
            x = values[p.arg]
            if p.role == _OUTPUT and x is None:
                if self.accum:
                    raise TypeError(f"out: required for an accum kernel (C is read and updated); spec: {self.spec}")
                x = values["out"] = np.empty(p.shape, self._np_dtype[p.name])
            elif p.role == _SCALAR:
                if not isinstance(x, float):
                    self._check(p, x)
                    x = float(x)
            elif not (type(x) is np.ndarray and x.shape == p.shape and x.dtype in self._accepted[p.name]):
                self._check(p, x)
            ordered.append(x)
        if which != 2 and not self.supported:  # the reference loop is plain C++: it always runs
            raise RuntimeError(
                f"kernel '{self.spec}' uses ISA features this CPU lacks; compile it with a lower isa= "
                "(e.g. isa='avx2' or 'scalar'), or call .reference()"
            )
        try:
            self._call(self._index, which, tuple(ordered))
        except ValueError:
            for p, x in zip(self.params, ordered):
                self._check(p, x)
            raise  # overlap: the C++ message says so
        return values["out"]

    # -- calls -----------------------------------------------------------------------------------
    def __call__(self, *args, out=None, parallel: bool = True, **terms) -> np.ndarray:
        """C = A·B and the epilogue (``accum``: C += A·B into ``out``). ``parallel=False`` runs the tasks
        serially in the calling thread (the header's parallel-for overload with a plain loop). The GIL
        is released."""
        return self._run(0 if parallel else 1, args, out, terms)

    def reference(self, *args, out=None, **terms) -> np.ndarray:
        """The header's ``NAME_reference`` loop on the same arguments (same checks)."""
        return self._run(2, args, out, terms)

    # -- random arguments ------------------------------------------------------------------------
    def random_inputs(self, rng: np.random.Generator | int | None = None, scale: float = 1.0):
        """Random arrays for the op's operands (a, b, c), of the right shapes and dtypes (uniform in
        [-scale, scale)); ``random_terms`` makes the epilogue's."""
        rng = np.random.default_rng(rng)
        return tuple(self._uniform(rng, p, -scale, scale) for p in self.params if not p.term)

    def random_terms(self, rng: np.random.Generator | int | None = None) -> dict:
        """Keyword arguments for the epilogue's terms: the scale 0.75, colscale uniform in [0.5, 1.5),
        other arrays (bias, residual) uniform in [-1, 1)."""
        rng = np.random.default_rng(rng)
        out = {}
        for p in self.params:
            if p.term:
                lo, hi = _COLSCALE_RANGE if p.name == "colscale" else (-1.0, 1.0)
                out[p.name] = _SCALE if p.role == _SCALAR else self._uniform(rng, p, lo, hi)
        return out

    def _uniform(self, rng: np.random.Generator, p: Param, lo: float, hi: float) -> np.ndarray:
        d = self._np_dtype[p.name]
        if d.kind in "iu":  # a weight format's bytes, or zero points: small values (no NaN scales)
            return rng.integers(0, 16, p.shape).astype(d)
        x = rng.random(p.shape, dtype=np.float32)
        x *= np.float32(hi - lo)
        x += np.float32(lo)
        d = self._np_dtype[p.name]
        return x if d == _F32 else x.astype(d)

    def __repr__(self) -> str:
        return f"<morello_build.Kernel {self.namespace}::{self.name} '{self.spec}' shapes={self.shapes}>"
