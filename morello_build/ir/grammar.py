"""The spec string grammar (a contract: DESIGN.md, README): a user's spec string <-> ``UserSpec`` -> ``Spec``."""

from __future__ import annotations

from dataclasses import dataclass

from morello_build.ir import aquant
from morello_build.ir.dtypes import DType
from morello_build.ir.epilogue import ACTIVATIONS, NO_EPILOGUE, Epilogue
from morello_build.ir.formats import GROUPED, PLAIN, SCALE_DTYPES, grouped, is_format
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
_FORMATS = (*PLAIN, *GROUPED)
ACCEPTED = (
    "matmul MxKxN [a=DTYPE[:LAYOUT]] "
    "[b=DTYPE[:LAYOUT]|b=FORMAT:col [group=G|group=channel] [scales=f32|bf16|f16] [zero]] "
    f"[c=DTYPE[:LAYOUT]] [aquant=i8] [batch=B] (FORMAT: {'|'.join(_FORMATS)}) "
    f"[scale] [colscale] [bias] [act={_ACTS}] [residual] [accum] [serial], or "
    f"gated MxKxN [a=..] [b=..] [c=..] [aquant=i8] [batch=B] [bias] [act={_ACTS}] [serial]"
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
            TensorSpec(shape, dt, _LAYOUTS[lay], alias=alias_stride(int(shape[1 if lay == "col" else 2] * dt.bytes)))
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
    batch, accum, serial, seen, epi, fopts, aq = 1, False, False, set(), {}, {}, None
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
        elif key in _FORMAT_OPTIONS:
            fopts[key] = tok
        elif key == "aquant":
            aq = tok
        elif key == "b" and tok.split("=", 1)[1].partition(":")[0] in _FORMATS:
            dtypes[1], layouts[1] = _format_token(tok), "col"
        elif key in ("a", "b", "c") and "=" in tok:
            i = "abc".index(key)
            dt, colon, lay = tok.split("=", 1)[1].partition(":")
            if dt not in _DTYPES:
                more = f"; for b also the weight formats {', '.join(_FORMATS)}" if key == "b" else ""
                raise _bad(tok, f"unknown dtype '{dt}' (accepted: {', '.join(_DTYPES)}{more})")
            if colon and lay not in _LAYOUTS:
                raise _bad(tok, f"unknown layout '{lay}' (accepted: {', '.join(_LAYOUTS)})")
            dtypes[i], layouts[i] = _DTYPES[dt], lay if colon else "row"
        else:
            raise _bad(tok, "unknown option")
    dtypes[1] = _weight_format(dtypes[1], fopts, k)
    if aq is not None:
        dtypes[0] = _quantized_a(aq, dtypes, layouts[0], k, kind)
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


_FORMAT_OPTIONS = ("group", "scales", "zero")


def _format_token(tok: str) -> str:
    """A b=FORMAT[:col] token's format name (its options come in their own tokens)."""
    name, colon, lay = tok.split("=", 1)[1].partition(":")
    if colon and lay != "col":
        raise _bad(tok, f"{name} weights are stored as N columns of K values: write b={name}:col")
    return name


def _weight_format(b, fopts: dict, k: int):
    """B's (or B1's and B2's) dtype, or its Format (ir/formats.py) with the group, scales and zero options applied."""
    if not isinstance(b, str):
        if fopts:
            raise _bad(next(iter(fopts.values())), "group=, scales= and zero go with b=i8 or b=i4")
        return b
    if b in PLAIN:
        if fopts:
            raise _bad(next(iter(fopts.values())), f"{b} has no options (group=, scales= and zero are for i8, i4)")
        fmt = PLAIN[b]
    else:
        if "group" not in fopts:
            raise _bad(f"b={b}:col", f"{b} needs group=G (values along K per scale) or group=channel")
        g = fopts["group"].split("=", 1)[1] if "=" in fopts["group"] else ""
        group = k if g == "channel" else _positive_int(fopts["group"], g)
        sc = fopts["scales"].split("=", 1)[1] if "scales" in fopts and "=" in fopts["scales"] else "f32"
        if sc not in SCALE_DTYPES:
            raise _bad(fopts["scales"], f"unknown scale dtype '{sc}' (accepted: {', '.join(SCALE_DTYPES)})")
        if "zero" in fopts and fopts["zero"] != "zero":
            raise _bad(fopts["zero"], "zero takes no value")
        fmt = grouped(b, group, sc, "zero" in fopts)
    if why := fmt.k_problem(k):
        raise _bad(f"b={b}:col", why)
    return fmt


def _quantized_a(tok: str, dtypes, layout: str, k: int, kind: str):
    """A's dtype under aquant=i8 (ir/aquant.py), or the one-line reason it cannot serve this spec."""
    if tok != "aquant=i8":
        raise _bad(tok, "the one activation quantization is aquant=i8 (int8 per 32-value block of A)")
    fmt = dtypes[1] if is_format(dtypes[1]) else None
    if why := aquant.problem(fmt, dtypes[0], k):
        raise _bad(tok, why)
    if layout != "row":
        raise _bad(tok, "A must be row-major (it is quantized in blocks along K)")
    return aquant.F32Q8


def format_spec(u: UserSpec) -> str:
    """The canonical spec string: defaults omitted, options in grammar order."""
    parts = [u.kind, f"{u.m}x{u.k}x{u.n}"]
    for name, dt, lay in zip("abc", u.dtypes, u.layouts):
        if is_format(dt):
            parts.append(f"b={dt.name}:col" + _format_options(dt, u.k))
        elif aquant.is_quantized_a(dt):
            continue  # aquant=i8, after the operands
        elif dt != DType.F32 or lay != "row":
            parts.append(f"{name}={dt.value}" + (f":{lay}" if lay != "row" else ""))
    if aquant.is_quantized_a(u.dtypes[0]):
        parts.append("aquant=i8")
    if u.batch != 1:
        parts.append(f"batch={u.batch}")
    if u.epilogue:
        parts.append(u.epilogue.describe())
    if u.accum:
        parts.append("accum")
    if u.serial:
        parts.append("serial")
    return " ".join(parts)


def _format_options(fmt, k: int) -> str:
    if fmt.scales is None:
        return ""
    group = "channel" if fmt.group == k else str(fmt.group)
    return f" group={group} scales={fmt.scales}" + (" zero" if fmt.zero else "")


assert set(_LAYOUTS) <= set(NAMED)
