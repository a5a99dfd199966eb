"""Specs as (table key, point in Z>=0) and decisions as short strings, both ways.

A canonical spec is split into
- a *key*: everything discrete (op kind, batch, per operand dtype / layout digits / level / contiguity /
  vector size / stride class, accum, serial, and per shape dim whether its size is a power of two), and
- a *point*: three shape coordinates and the three memory limits (L1, VRF, RF bytes).

Shape coordinates are ``log2(size)`` for powers of two and, for other sizes, their index among the
non-powers of two (3->1, 5->2, 6->3, 7->4, 9->5...); the key says which, so a coordinate always names
exactly one size and neighbouring coordinates are neighbouring sizes of the same kind. Move and Zero
have two shape dims; their third coordinate is 0.

A *decision* is the action taken at a spec, written by the action itself (``encode`` of each action in
synth/actions/) relative to the spec's shape where that matters (``F``: a tile dim equal to the full
extent) so that one decision can answer neighbouring shapes: ``K:<kernel>``, ``T:s|p:<tile dims>``,
``M:<operand>:<level>:<layout|->:<dtype|->``, ``A`` (to-accumulate), and ``-`` (no program fits).
"""

from __future__ import annotations

from functools import lru_cache
from math import prod

from morello_build.ir import aquant
from morello_build.ir.epilogue import NO_EPILOGUE, Epilogue
from morello_build.ir.formats import from_value
from morello_build.ir.layout import Digit, Layout
from morello_build.ir.spec import DType, Gate, Gated, Level, Matmul, Move, Pair, TensorSpec, Zero
from morello_build.synth import actions

NONE = "-"  # the decision "no program fits these limits"
_OPS = {"matmul": Matmul, "gated": Gated, "pair": Pair, "gate": Gate, "move": Move, "zero": Zero}


# -- shape coordinates -----------------------------------------------------------------------------
def _is_pow2(s: int) -> bool:
    return s & (s - 1) == 0


def size_coord(s: int) -> tuple[str, int]:
    if _is_pow2(s):
        return "p", s.bit_length() - 1
    return "l", s - s.bit_length()


def coord_size(mode: str, c: int) -> int:
    if mode == "p":
        return 1 << c
    b = max(c.bit_length(), 1)
    while True:  # s - bit_length(s) == c has exactly one non-power-of-two solution
        s = c + b
        if s.bit_length() == b and not _is_pow2(s):
            return s
        b += 1


# -- keys and points -------------------------------------------------------------------------------
# Key text: "kind|batch|modes|accum serial|operand|operand..." with each operand
# "dtype/level/contig/vector size/alias/dim.div.mod;dim.div.mod..." (empty fields for None).
@lru_cache(maxsize=4096)
def _dtype(text: str):
    """A key's dtype: a DType, or a weight Format (ir/formats.py: its value names its parameters)."""
    return from_value(text) or aquant.from_value(text) or DType(text)


def _tensor_key(dtype: DType, layout: Layout, level: Level, contig: int, vs: int | None, alias: int) -> str:
    digits = ";".join(f"{d.dim}.{d.div}.{'' if d.mod is None else d.mod}" for d in layout.digits)
    return f"{dtype.value}/{int(level)}/{contig}/{'' if vs is None else vs}/{alias}/{digits}"


def _tensor_from(text: str, shape) -> TensorSpec:
    dtype, level, contig, vs, alias, digits = text.split("/")
    ds = []
    for part in digits.split(";") if digits else ():
        dim, div, mod = part.split(".")
        ds.append(Digit(int(dim), int(div), int(mod) if mod else None))
    return TensorSpec(
        shape, _dtype(dtype), Layout(tuple(ds)), Level(int(level)), int(contig), int(vs) if vs else None, int(alias)
    )


@lru_cache(maxsize=1 << 16)
def op_key(op) -> tuple[str, tuple[int, int, int], int]:
    """(key text, shape coordinates, iteration volume) of a canonical op."""
    shape = op.iter_shape
    modes, coords = "", []
    for s in shape[1:]:
        m, c = size_coord(s)
        modes += m
        coords.append(c)
    while len(coords) < 3:
        modes += "-"
        coords.append(0)
    flags = f"{int(op.accum)}{int(op.serial)}" + (f":{op.epilogue.describe()}" if op.epilogue else "")
    parts = [op.kind, str(shape[0]), modes, flags]
    parts += [_tensor_key(t.dtype, t.layout, t.level, t.contig, t.vector_size, t.alias) for t in op.operands]
    return "|".join(parts), tuple(coords), prod(shape)


def op_from_key(key: str, coords) -> object:
    """The op at shape ``coords`` of table ``key`` (inverse of ``op_key``)."""
    kind, batch, modes, flags, *tensors = key.split("|")
    shape = (int(batch),) + tuple(coord_size(m, c) for m, c in zip(modes, coords) if m != "-")
    cls = _OPS[kind]
    ops = [_tensor_from(t, tuple(shape[j] for j in dims)) for t, dims in zip(tensors, cls.operand_iter_dims)]
    accum, serial = flags[0] == "1", flags[1] == "1"
    pair = cls in (Gated, Gate)
    epilogue = Epilogue.from_describe(flags[3:], pair) if flags[2:3] == ":" else NO_EPILOGUE
    if cls is Matmul:
        return Matmul(*ops, accum=accum, serial=serial, epilogue=epilogue)
    if cls in (Move, Gated, Gate):
        return cls(*ops, serial=serial, epilogue=epilogue)
    return cls(*ops, serial=serial)


# -- decisions -------------------------------------------------------------------------------------
def action_text(action, op) -> str:
    """The decision text of ``action`` (None: no program fits) taken at ``op``: each action writes itself."""
    return NONE if action is None else action.encode(op)


def action_from_text(text: str, op):
    """The action a decision names at ``op`` (None for the no-program decision)."""
    return None if text == NONE else actions.decode(text, op)
