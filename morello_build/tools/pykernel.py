"""The Python callable around one compiled kernel (``morello_build.tools.pyapi`` builds it): argument
checks in Python (types, shapes, dtypes, with messages naming the argument), the call in C++."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _bf16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


_U16 = np.dtype(np.uint16)
_F32 = np.dtype(np.float32)


def _layouts_of(spec: str) -> tuple[str, str, str]:
    from morello_build.ir.grammar import parse_spec

    return tuple(parse_spec(spec).layouts)


class Kernel:
    """A compiled kernel: ``f(a, b)`` returns C, ``f(a, b, out=c)`` writes C in place (required for ``accum``).

    Attributes: ``spec`` (canonical spec string), ``name``, ``namespace``, ``header_path`` (the generated
    header in the cache), ``extension_path``, ``batch, m, k, n``, ``accum``, ``dtypes`` (e.g.
    ``("f32", "bf16", "f32")``), ``layouts``, ``shapes`` (the numpy shapes of a, b, c as stored),
    ``supported`` (whether this CPU has the ISA features the kernel uses).
    """

    def __init__(self, module, index: int, header_path: Path, extension_path: Path):
        info = module.info(index)
        self._module, self._index, self._call = module, index, module.call
        self.name: str = info["name"]
        self.namespace: str = info["namespace"]
        self.spec: str = info["spec"]
        self.batch, self.m, self.k, self.n = info["batch"], info["m"], info["k"], info["n"]
        self.accum: bool = info["accum"]
        self.dtypes: tuple[str, str, str] = tuple(info["dtypes"])
        self.layouts: tuple[str, str, str] = _layouts_of(self.spec)
        self.header_path = Path(header_path)
        self.extension_path = Path(extension_path)
        self.supported: bool = bool(module.supported(index))
        logical = ((self.m, self.k), (self.k, self.n), (self.m, self.n))
        lead = (self.batch,) if self.batch > 1 else ()
        self.shapes = tuple(lead + (rc if lay == "row" else rc[::-1]) for rc, lay in zip(logical, self.layouts))
        bf16 = _bf16()
        self._np_dtypes = tuple(_F32 if d == "f32" else bf16 for d in self.dtypes)
        # The numpy dtypes accepted for each operand: bf16 also as uint16 holding the bits.
        self._accepted = tuple((_F32,) if d == "f32" else (bf16, _U16) for d in self.dtypes)

    def _check(self, i: int, what: str, x, write: bool = False) -> None:
        """Raise the friendly error for a bad argument (TypeError for the type or dtype, else ValueError)."""
        shape, want = self.shapes[i], self._np_dtypes[i]
        wanted = f"{shape} {want.name}{' (or uint16 bits)' if want != _F32 else ''} C-contiguous" + (
            " writeable" if write else ""
        )
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{what}: expected a numpy array of shape {wanted}, got {type(x).__name__}")
        ok_dtype = x.dtype in self._accepted[i]
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

    def _run(self, which: int, a, b, out):
        # Fast path: type, shape and dtype here; sizes, contiguity, alignment, writeability and overlap are
        # checked in C++ (cheaply); on any problem, _check explains it in terms of the argument.
        sh, acc = self.shapes, self._accepted
        if not (type(a) is np.ndarray and a.shape == sh[0] and a.dtype in acc[0]):
            self._check(0, "a", a)
        if not (type(b) is np.ndarray and b.shape == sh[1] and b.dtype in acc[1]):
            self._check(1, "b", b)
        if out is None:
            if self.accum:
                raise TypeError(f"out: required for an accum kernel (C is read and updated); spec: {self.spec}")
            out = np.empty(sh[2], self._np_dtypes[2])
        elif not (type(out) is np.ndarray and out.shape == sh[2] and out.dtype in acc[2]):
            self._check(2, "out", out, write=True)
        if which != 2 and not self.supported:  # the reference loop is plain C++: it always runs
            raise RuntimeError(
                f"kernel '{self.spec}' uses ISA features this CPU lacks; compile it with a lower isa= "
                "(e.g. isa='avx2' or 'scalar'), or call .reference()"
            )
        try:
            self._call(self._index, which, a, b, out)
        except ValueError:
            self._check(0, "a", a)
            self._check(1, "b", b)
            self._check(2, "out", out, write=True)
            raise  # overlap: the C++ message says so
        return out

    def __call__(self, a, b, out=None, *, parallel: bool = True) -> np.ndarray:
        """C = A·B (``accum``: C += A·B into ``out``). ``parallel=False`` runs the tasks serially in the
        calling thread (the header's parallel-for overload with a plain loop). The GIL is released."""
        return self._run(0 if parallel else 1, a, b, out)

    def reference(self, a, b, out=None) -> np.ndarray:
        """The header's ``NAME_reference`` loop on the same arguments (same checks)."""
        return self._run(2, a, b, out)

    def random_inputs(self, rng: np.random.Generator | int | None = None, scale: float = 1.0):
        """Random (a, b, c) arrays of the right shapes and dtypes (uniform in [-scale, scale))."""
        rng = np.random.default_rng(rng)
        out = []
        for s, d in zip(self.shapes, self._np_dtypes):
            x = rng.random(s, dtype=np.float32)
            x *= np.float32(2 * scale)
            x -= np.float32(scale)
            out.append(x if d == _F32 else x.astype(d))
        return tuple(out)

    def __repr__(self) -> str:
        return f"<morello_build.Kernel {self.namespace}::{self.name} '{self.spec}' shapes={self.shapes}>"
