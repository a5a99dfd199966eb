"""The spec string grammar (a contract: DESIGN.md, README): a user's spec string <-> ``UserSpec`` -> ``Spec``."""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir.dtypes import DType
from morello_build.ir.epilogue import ACTIVATIONS, NO_EPILOGUE, Epilogue
from morello_build.ir.layout import NAMED, col_major, row_major
from morello_build.ir.ops import GATED, MATMUL
from morello_build.ir.sizes import operand_bytes_problem, size_problem
from morello_build.ir.spec import Gated, Matmul, MemoryLimits, Spec, TensorSpec, alias_stride, canonicalize


class SpecError(ValueError):
    """A user-facing problem with a spec string: the message is one line naming the bad token."""


# -- the spec string grammar (contract) -----------------------------------------------------------
_LAYOUTS = {"row": row_major(), "col": col_major()}
_DTYPES = {d.value: d for d in DType}
_ACTS = "|".join(ACTIVATIONS)
ACCEPTED = (
    "matmul MxKxN [a=DTYPE[:LAYOUT]] [b=DTYPE[:LAYOUT]] [c=DTYPE[:LAYOUT]] [batch=B] "
    f"[scale] [colscale] [bias] [act={_ACTS}] [residual] [accum] [serial], or "
    f"gated MxKxN [a=..] [b=..] [c=..] [batch=B] [bias] [act={_ACTS}] [serial]"
)
_OPS = {"matmul": MATMUL, "gated": GATED}  # the ops a user may ask for
_NOT_GATED = ("accum", "scale", "colscale", "residual")  # the gated pair's epilogue is its own
_EPILOGUE_FLAGS = ("scale", "colscale", "bias", "residual")


@dataclass(frozen=True)
class UserSpec:
    """What a spec string says, before it becomes a Spec at GL."""

    m: int
    k: int
    n: int
    dtypes: tuple[DType, DType, DType] = (DType.F32, DType.F32, DType.F32)
    layouts: tuple[str, str, str] = ("row", "row", "row")
    batch: int = 1
    accum: bool = False
    serial: bool = False
    epilogue: Epilogue = NO_EPILOGUE
    kind: str = "matmul"  # or "gated": A with two weight matrices B1, B2 that b=... describes alike

    @property
    def definition(self):
        return _OPS[self.kind]

    @property
    def iter_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.m, self.k, self.n)

    def operand_shapes(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(tuple(self.iter_shape[j] for j in dims) for dims in self.definition.operand_iter_dims)

    def operand_dtypes(self) -> tuple[DType, ...]:
        """Each operand's dtype (the gated pair's B1 and B2 both have b's)."""
        return self.dtypes if self.kind == "matmul" else (self.dtypes[0], self.dtypes[1], *self.dtypes[1:])

    def operand_layouts(self) -> tuple[str, ...]:
        return self.layouts if self.kind == "matmul" else (self.layouts[0], self.layouts[1], *self.layouts[1:])

    def to_spec(self, limits: MemoryLimits | None = None) -> Spec:
        shapes = self.operand_shapes()
        ops = tuple(
            TensorSpec(shape, dt, _LAYOUTS[lay], alias=alias_stride(shape[1 if lay == "col" else 2] * dt.bytes))
            for shape, dt, lay in zip(shapes, self.operand_dtypes(), self.operand_layouts())
        )
        if self.kind == "gated":
            op = Gated(*ops, serial=self.serial, epilogue=self.epilogue)
        else:
            op = Matmul(*ops, accum=self.accum, serial=self.serial, epilogue=self.epilogue)
        return canonicalize(Spec(op, limits) if limits else Spec(op))

    def __str__(self) -> str:
        return format_spec(self)


def _bad(token: str, why: str) -> SpecError:
    return SpecError(f"bad spec token '{token}': {why}; accepted: {ACCEPTED}")


def _positive_int(token: str, text: str) -> int:
    if why := size_problem(text):
        raise _bad(token, why)
    return int(text)


def parse_spec(text: str) -> UserSpec:
    """Parse the spec string grammar of DESIGN.md; raise SpecError naming the first bad token."""
    tokens = text.split()
    if not tokens:
        raise SpecError(f"empty spec; accepted: {ACCEPTED}")
    kind = tokens[0]
    if kind not in _OPS:
        raise _bad(kind, f"unknown operation (accepted: {', '.join(_OPS)})")
    if len(tokens) < 2:
        raise SpecError(f"spec is missing its MxKxN shape; accepted: {ACCEPTED}")
    dims = tokens[1].split("x")
    if len(dims) != 3:
        raise _bad(tokens[1], "expected a shape MxKxN (three sizes separated by the letter x)")
    m, k, n = (_positive_int(tokens[1], d) for d in dims)
    dtypes, layouts = [DType.F32] * 3, ["row"] * 3
    batch, accum, serial, seen, epi = 1, False, False, set(), {}
    for tok in tokens[2:]:
        key = tok.split("=", 1)[0]
        if key in seen:
            raise _bad(tok, "given twice")
        seen.add(key)
        if kind == "gated" and key in _NOT_GATED:
            raise _bad(tok, "not accepted by gated (its epilogue is act(A·B1 + bias1) * (A·B2 + bias2))")
        if tok == "accum":
            accum = True
        elif tok == "serial":
            serial = True
        elif tok in _EPILOGUE_FLAGS:
            epi[tok] = True
        elif key == "act" and "=" in tok:
            epi["act"] = _activation(tok)
        elif key == "batch" and "=" in tok:
            batch = _positive_int(tok, tok.split("=", 1)[1])
        elif key in ("a", "b", "c") and "=" in tok:
            i = "abc".index(key)
            dt, colon, lay = tok.split("=", 1)[1].partition(":")
            if dt not in _DTYPES:
                raise _bad(tok, f"unknown dtype '{dt}' (accepted: {', '.join(_DTYPES)})")
            if colon and lay not in _LAYOUTS:
                raise _bad(tok, f"unknown layout '{lay}' (accepted: {', '.join(_LAYOUTS)})")
            dtypes[i], layouts[i] = _DTYPES[dt], lay if colon else "row"
        else:
            raise _bad(tok, "unknown option")
    epilogue = Epilogue(**{"act": "gelu", **epi, "pair": True}) if kind == "gated" else Epilogue(**epi)
    if epilogue and accum:
        raise _bad("accum", "an epilogue overwrites C (pass the old C as the residual instead)")
    if epilogue and layouts[2] != "row":
        raise _bad(f"c={dtypes[2].value}:{layouts[2]}", "an epilogue needs C row-major")
    user = UserSpec(m, k, n, tuple(dtypes), tuple(layouts), batch, accum, serial, epilogue, kind)
    if why := operand_bytes_problem(user.operand_shapes(), user.operand_dtypes()):
        raise SpecError(f"spec '{' '.join(tokens)}' is too large: {why}")
    return user


def _activation(tok: str) -> str:
    name = tok.split("=", 1)[1]
    if name not in ACTIVATIONS:
        raise _bad(tok, f"unknown activation '{name}' (accepted: {', '.join(ACTIVATIONS)})")
    return name


def format_spec(u: UserSpec) -> str:
    """The canonical spec string: defaults omitted, options in grammar order."""
    parts = [u.kind, f"{u.m}x{u.k}x{u.n}"]
    for name, dt, lay in zip("abc", u.dtypes, u.layouts):
        if dt != DType.F32 or lay != "row":
            parts.append(f"{name}={dt.value}" + (f":{lay}" if lay != "row" else ""))
    if u.batch != 1:
        parts.append(f"batch={u.batch}")
    if u.epilogue:
        parts.append(u.epilogue.describe())
    if u.accum:
        parts.append("accum")
    if u.serial:
        parts.append("serial")
    return " ".join(parts)


assert set(_LAYOUTS) <= set(NAMED)
