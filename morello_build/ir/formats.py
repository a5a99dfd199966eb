"""Weight formats of operand B: low-precision and quantized values, first-class dtypes of the synthesizer.

A ``Format`` stands where a ``DType`` stands in a ``TensorSpec`` (it has the same ``value``, ``bytes``
and ``ctype``), and describes the *logical* K×N B a kernel reads as f32: the spec algebra works on
logical elements, and a format maps a logical element offset ``off`` (B stored ``col``: N columns of K
values, ``off = (batch * N + n) * K + k``) to its bytes:

- ``unit`` values are stored in ``unit_size`` elements of ``ctype`` (the unit of addressing):
  a pointer to the unit holding element ``off`` is ``b + off / unit * unit_size``;
- ``group`` values along K share one scale (and zero point): ``scale[off / group]``. Block formats
  (ggml's) interleave the scale into the block (``unit == group``); the others take separate
  ``b_scales`` (and ``b_zeros``) arrays of ``N * K / group`` values, column-major like B.

Every format's value is ``dequantize`` (numpy, the definition) and ``cxx_deq`` (C++, the reference loop
and scalar kernels: runtime.hpp.j2). Formats:

- ``f16``: IEEE binary16 (``uint16_t`` bits). ``e4m3``: OCP FP8 E4M3FN (bias 7, no infinities,
  S.1111.111 is NaN; ``uint8_t`` bits; ml_dtypes.float8_e4m3fn).
- ``sfp``: gemma.cpp's 8-bit "switching floating point" (compression/sfp-inl.h, ``SfpCodec::DecBytes``; its
  weights' default), ``uint8_t``: sign bit, then 7 bits e; e = 0 is zero; e < 64 decodes to the bf16 bits
  0x3400 + 32e (two mantissa bits), else 0x3800 + 16e (three); |value| <= 1.875 (the engine's tensor scale
  applies on top: the ``scale`` epilogue).
- ``i8`` with groups of G along K (or ``channel``: G = K) and scales f32/bf16/f16, optional zero point
  (``value = (q - z) * s``, z an int8 like q, stored as ``int8_t``): ``int8_t`` values.
- ``i4`` likewise, two values per byte: element ``2i`` of a column is the low nibble of byte ``i``,
  ``2i+1`` the high nibble; unsigned nibbles 0..15, ``value = (q - z) * s`` with z a ``uint8_t``
  (0..15), or ``(q - 8) * s`` without zero point (symmetric, as ggml's Q4_0).
- ``q8_0`` (ggml ``block_q8_0``, ggml/src/ggml-common.h): blocks of 32 values, 34 bytes: fp16 scale d,
  then 32 int8 q; value = d * q.
- ``q4_0`` (ggml ``block_q4_0``): blocks of 32 values, 18 bytes: fp16 d, then 16 bytes; byte j holds
  element j in its low nibble and element j + 16 in its high nibble; value = d * (nibble - 8)
  (ggml-quants.c ``dequantize_row_q4_0``).
- ``gemma_i8`` (gemma.cpp's ``I8Stream``, compression/int-inl.h ``IntCodec``): groups of 128 values, 132
  bytes: bf16 ``inv_scale``, bf16 ``zeropoint``, then 128 int8 q; value = inv_scale * q + (-zeropoint *
  inv_scale), in f32 (``DequantizeGroup``). Groups run along K within a column (K a multiple of 128, as in
  every Gemma dimension), so a column's bytes are its K / 128 groups one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass

SCALE_DTYPES = {"f32": ("float", 4), "bf16": ("uint16_t", 2), "f16": ("uint16_t", 2)}
BLOCK = 32  # ggml's QK8_0 and QK4_0
GEMMA_GROUP = 128  # gemma.cpp's I8Stream::kGroupSize


@dataclass(frozen=True)
class Format:
    """A weight format: how a logical K×N B is stored (see the module docstring)."""

    name: str  # f16, e4m3, i8, i4, q8_0, q4_0, gemma_i8
    bits: int  # bits per value
    ctype: str  # the C type of B's array
    unit: int  # values per addressing unit
    unit_size: int  # ctype elements per addressing unit
    group: int = 1  # values along K sharing one scale (1: no scale)
    scales: str | None = None  # separate scale array's dtype (f32, bf16, f16); None: none or in the block
    zero: bool = False  # a separate zero-point array (b_zeros)

    @property
    def value(self) -> str:
        """The text of the format in DB keys and descriptions (no '/', ':' or spaces)."""
        if self.scales is None:
            return self.name
        return f"{self.name}.g{self.group}.{self.scales}{'.z' if self.zero else ''}"

    @property
    def block(self) -> bool:
        """Block formats (ggml's, gemma.cpp's I8): scale interleaved in each block of ``group`` values."""
        return self.name in BLOCK_HEADERS

    @property
    def header(self) -> str:
        """What precedes a block's values: "f16" (ggml's scale d) or "bf16x2" (gemma's inv_scale, zeropoint)."""
        return BLOCK_HEADERS.get(self.name, "")

    @property
    def header_bytes(self) -> int:
        return {"f16": 2, "bf16x2": 4}.get(self.header, 0)

    @property
    def bytes(self) -> float:
        """Bytes per value of B's array (ggml blocks: their scale included; separate scales not)."""
        return self.unit_size * _CSIZE[self.ctype] / self.unit

    @property
    def scale_bytes(self) -> float:
        """Bytes per value of the separate scale and zero-point arrays."""
        if self.scales is None:
            return 0.0
        return (SCALE_DTYPES[self.scales][1] + (1 if self.zero else 0)) / self.group

    @property
    def scale_ctype(self) -> str:
        return SCALE_DTYPES[self.scales][0] if self.scales else ""

    @property
    def zero_ctype(self) -> str:
        return "int8_t" if self.name == "i8" else "uint8_t"

    @property
    def slug(self) -> str:
        """The C++ helper suffix (runtime.hpp.j2: deq_<slug>)."""
        return self.name

    def storage_elems(self, values: int) -> int:
        """``ctype`` elements holding ``values`` values (a multiple of the unit)."""
        return values // self.unit * self.unit_size

    def extra_arrays(self) -> tuple[tuple[str, str], ...]:
        """(suffix, ctype) of the separate arrays a kernel takes after C, in this order."""
        out = (("scales", self.scale_ctype),) if self.scales else ()
        return out + ((("zeros", self.zero_ctype),) if self.zero else ())

    def k_problem(self, k: int) -> str | None:
        """Why a K cannot be stored in this format, or None."""
        if self.group > 1 and k % self.group:
            return f"K = {k} is not a multiple of the {self.value} group of {self.group} values"
        if self.group % self.unit:
            return (
                f"group {self.group} is not a multiple of {self.unit} ({self.name} packs {self.unit} values per byte)"
            )
        if self.unit > 1 and k % self.unit:
            return f"K = {k} is not a multiple of {self.unit} ({self.name} packs {self.unit} values per unit)"
        return None

    def cxx_deq(self, rt: str, root: str, off: str) -> str:
        """C++ f32 value of logical element ``off`` of B (the reference loop and scalar kernels)."""
        if self.name in ("f16", "e4m3", "sfp"):
            return f"::{rt}::{self.name}_to_f32({root}[{off}])"
        if self.name == "q8a":  # quantized A (ir/aquant.py): sa * qa
            return f"::{rt}::deq_q8a({root}, {off})"
        if self.block:
            return f"::{rt}::deq_{self.name}({root}, {off})"
        g = f"({off}) / {self.group}"
        if self.zero:
            z = f"float({root}_zeros[{g}])"
        else:
            z = "8.0f" if self.name == "i4" else "0.0f"
        q = f"float({root}[{off}])" if self.name == "i8" else f"float(::{rt}::nibble({root}, {off}))"
        return f"(({q} - {z}) * ::{rt}::scale_{self.scales}({root}_scales[{g}]))"

    def __str__(self) -> str:
        return self.value


_CSIZE = {"uint8_t": 1, "int8_t": 1, "uint16_t": 2}
BLOCK_HEADERS = {"q8_0": "f16", "q4_0": "f16", "gemma_i8": "bf16x2"}
F16 = Format("f16", 16, "uint16_t", 1, 1)
E4M3 = Format("e4m3", 8, "uint8_t", 1, 1)
SFP = Format("sfp", 8, "uint8_t", 1, 1)
Q8_0 = Format("q8_0", 8, "uint8_t", BLOCK, 34, BLOCK)
Q4_0 = Format("q4_0", 4, "uint8_t", BLOCK, 18, BLOCK)
GEMMA_I8 = Format("gemma_i8", 8, "uint8_t", GEMMA_GROUP, GEMMA_GROUP + 4, GEMMA_GROUP)
PLAIN = {f.name: f for f in (F16, E4M3, SFP, Q8_0, Q4_0, GEMMA_I8)}  # formats without parameters
GROUPED = ("i8", "i4")  # formats that take group=, scales= and zero


def grouped(name: str, group: int, scales: str = "f32", zero: bool = False) -> Format:
    if name == "i8":
        return Format("i8", 8, "int8_t", 1, 1, group, scales, zero)
    return Format("i4", 4, "uint8_t", 2, 1, group, scales, zero)


def from_value(text: str) -> Format | None:
    """The format whose ``value`` is ``text`` (DB keys), or None."""
    if text in PLAIN:
        return PLAIN[text]
    parts = text.split(".")
    if parts[0] in GROUPED and len(parts) in (3, 4) and parts[1][:1] == "g" and parts[2] in SCALE_DTYPES:
        return grouped(parts[0], int(parts[1][1:]), parts[2], len(parts) == 4)
    return None


def is_format(dtype) -> bool:
    return isinstance(dtype, Format)


# -- numpy: the definitions ---------------------------------------------------------------------------------
def _scales_f32(s, dtype: str):
    import numpy as np

    if dtype == "f32":
        return np.asarray(s, np.float32)
    if dtype == "f16":
        return np.asarray(s, np.uint16).view(np.float16).astype(np.float32)
    return (np.asarray(s, np.uint16).astype(np.uint32) << 16).view(np.float32)


def stored_integers(fmt: Format, flat):
    """The integer values of an i8, i4, q8_0 or q4_0 array ``flat`` (1-D, C order) as int32, in element order
    (Q4_0's nibble − 8; i4's unsigned nibbles, zero point not subtracted), and the ggml blocks' fp16 d as f32:
    ggml blocks give ((blocks, 32) values, (blocks, 1) d), the others (values, None)."""
    import numpy as np

    if fmt.name in ("q8_0", "q4_0"):
        blocks = flat.view(np.uint8).reshape(-1, fmt.unit_size)
        d = blocks[:, :2].copy().view(np.float16).astype(np.float32)
        if fmt.name == "q8_0":
            return blocks[:, 2:].view(np.int8).astype(np.int32), d
        qs = blocks[:, 2:]
        return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32) - 8, d
    if fmt.name == "i8":
        return flat.view(np.int8).astype(np.int32), None
    b = flat.view(np.uint8)
    return np.stack([b & 15, b >> 4], axis=1).reshape(-1).astype(np.int32), None


def dequantize(fmt: Format, data, k: int, scales=None, zeros=None):
    """The f32 values of columns stored in ``fmt``: ``data`` is B's array (any shape, C order, columns of K
    values one after the other); returns (columns, K) f32. (numpy: imported here, the generator needs none)"""
    import numpy as np

    flat = np.ascontiguousarray(data).reshape(-1)
    if fmt.name == "f16":
        return flat.view(np.uint16).view(np.float16).astype(np.float32).reshape(-1, k)
    if fmt.name == "e4m3":
        import ml_dtypes

        return flat.view(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32).reshape(-1, k)
    if fmt.name == "sfp":
        return sfp_to_f32(flat.view(np.uint8)).reshape(-1, k)
    if fmt.name == "gemma_i8":  # f32 arithmetic, as DequantizeGroup: inv_scale * q + (-zeropoint * inv_scale)
        blocks = flat.view(np.uint8).reshape(-1, fmt.unit_size)
        inv, zp = (_scales_f32(blocks[:, i : i + 2].copy().view(np.uint16), "bf16") for i in (0, 2))
        q = blocks[:, 4:].view(np.int8).astype(np.float32)
        return (inv * q + (-zp * inv)).astype(np.float32).reshape(-1, k)
    q, d = stored_integers(fmt, flat)
    if d is not None:  # ggml's blocks
        return (d * q.astype(np.float32)).reshape(-1, k)
    q = q.reshape(-1, fmt.group).astype(np.float32)
    s = _scales_f32(scales, fmt.scales).reshape(-1, 1)
    if fmt.zero:
        z = np.asarray(zeros).reshape(-1, 1).astype(np.float32)
    else:
        z = np.float32(8.0 if fmt.name == "i4" else 0.0)
    return ((q - z) * s).astype(np.float32).reshape(-1, k)


def sfp_to_f32(x):
    """gemma.cpp's SFP bytes as f32 (SfpCodec::DecBytes: the bf16 bits 0x3400 + 32e or 0x3800 + 16e)."""
    import numpy as np

    x = np.asarray(x, np.uint8).astype(np.uint32)
    e = x & 0x7F
    bf16 = np.where(e < 64, 0x3400 + 32 * e, 0x3800 + 16 * e) * (e != 0) | ((x & 0x80) << 8)
    return (bf16.astype(np.uint32) << 16).view(np.float32)
