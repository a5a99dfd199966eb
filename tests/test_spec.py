"""Specs: the spec string grammar (round trip, one-line errors naming the bad token), canonical forms,
immutability and hashing."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from morello_build.ir.grammar import SpecError, UserSpec, format_spec, parse_spec
from morello_build.ir.layout import col_major, interleaved, packed, row_major
from morello_build.ir.spec import DType, Level, Matmul, MemoryLimits, Spec, TensorSpec, canonicalize

user_specs = st.builds(
    UserSpec,
    m=st.integers(1, 5000),
    k=st.integers(1, 5000),
    n=st.integers(1, 20000),
    dtypes=st.tuples(*[st.sampled_from(list(DType))] * 3),
    layouts=st.tuples(*[st.sampled_from(["row", "col"])] * 3),
    batch=st.integers(1, 64),
    accum=st.booleans(),
    serial=st.booleans(),
)


# -- grammar --------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(user_specs)
def test_format_parse_round_trip(u):
    text = format_spec(u)
    assert parse_spec(text) == u
    assert format_spec(parse_spec(text)) == text
    assert str(u) == text


@settings(max_examples=100, deadline=None)
@given(user_specs, st.randoms(use_true_random=False), st.sampled_from([" ", "  ", "\t"]))
def test_any_option_order_parses_to_the_canonical_string(u, rnd, sep):
    """Options in any order, explicit defaults and extra whitespace all print back canonically."""
    canonical = format_spec(u)
    head, opts = canonical.split()[:2], canonical.split()[2:]
    explicit = [f"{n}={d.value}:{lay}" for n, d, lay in zip("abc", u.dtypes, u.layouts)]
    opts = [o for o in opts if o[:2] not in ("a=", "b=", "c=")] + explicit
    rnd.shuffle(opts)
    text = sep.join(head + opts)
    assert parse_spec(text) == u
    assert format_spec(parse_spec(text)) == canonical


def test_flagship():
    u = parse_spec("matmul 1x2048x16384 a=f32 b=bf16:col c=f32")
    assert (u.m, u.k, u.n) == (1, 2048, 16384)
    assert u.dtypes == (DType.F32, DType.BF16, DType.F32) and u.layouts == ("row", "col", "row")
    assert format_spec(u) == "matmul 1x2048x16384 b=bf16:col"
    spec = u.to_spec()
    assert spec.op.b.shape == (1, 2048, 16384) and spec.op.b.dtype == DType.BF16


@pytest.mark.parametrize(
    "text, token",
    [
        ("matmul 4x4x4 a=f64", "a=f64"),
        ("matmul 4x4x4 b=bf16:diag", "b=bf16:diag"),
        ("matmul 4x4x4 fast", "fast"),
        ("matmul 4x4x4 d=f32", "d=f32"),
        ("matmul 4x4x4 accum accum", "accum"),
        ("matmul 4x4x4 a=f32 a=bf16", "a=bf16"),
        ("matmul 4x4x4 batch=2 batch=3", "batch=3"),
        ("matmul 4x4", "4x4"),
        ("matmul 4x4x4x4", "4x4x4x4"),
        ("matmul 4xx4", "4xx4"),
        ("matmul 0x4x4", "0x4x4"),
        ("matmul 4x-1x4", "4x-1x4"),
        ("matmul 4x4xfour", "4x4xfour"),
        ("matmul 4x4x4 batch=0", "batch=0"),
        ("matmul 4x4x4 batch=two", "batch=two"),
        ("conv 4x4x4", "conv"),
        ("Matmul 4x4x4", "Matmul"),
    ],
)
def test_bad_strings_name_the_bad_token(text, token):
    with pytest.raises(SpecError) as e:
        parse_spec(text)
    msg = str(e.value)
    assert "\n" not in msg
    assert f"'{token}'" in msg
    assert "accepted" in msg


# -- sizes: what the generated code can index (ir/sizes.py) ---------------------------------------------
MAX = 2**31 - 1  # a C++ int (kernel_info) and an rtree_i32 coordinate


@pytest.mark.parametrize(
    "text, token, words",
    [
        ("matmul ４x4x4", "４x4x4", "'４' is not a positive integer in ASCII digits"),
        ("matmul 4x٤x4", "4x٤x4", "ASCII digits"),
        ("matmul 4x4x4 batch=²", "batch=²", "ASCII digits"),
        ("matmul 4×4×4", "4×4×4", "separated by the letter x"),
        (f"matmul {MAX + 1}x4x4", f"{MAX + 1}x4x4", f"size {MAX + 1} is too large (at most 2,147,483,647"),
        ("matmul 4x4x99999999999999999999", "4x4x99999999999999999999", "too large"),
        ("matmul 4x4x4 batch=99999999999", "batch=99999999999", "too large"),
    ],
)
def test_sizes_are_ascii_and_fit_a_cxx_int(text, token, words):
    with pytest.raises(SpecError) as e:
        parse_spec(text)
    assert f"'{token}'" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


@given(st.integers(MAX - 2, MAX), st.sampled_from(["row", "col"]))
@settings(max_examples=10, deadline=None)
def test_sizes_up_to_the_bound_round_trip(size, layout):
    for text in (f"matmul {size}x1x2 b=f32:{layout} batch=3", f"matmul 1x2x1 b=f32:{layout} batch={size}"):
        assert size in parse_spec(text).iter_shape and parse_spec(str(parse_spec(text))) == parse_spec(text)


@pytest.mark.parametrize(
    "text, ok",
    [
        (f"matmul {MAX}x{2**30}x1", True),  # a: 2^63 - 2^32 bytes
        (f"matmul {MAX}x{2**30 + 1}x1", False),
        (f"matmul {MAX}x{2**31 - 1}x1 a=bf16", True),  # 2-byte elements
        (f"matmul {MAX}x1x{2**30} batch=2", False),  # c
        (f"matmul 4x{MAX}x{MAX}", False),  # b
    ],
)
def test_each_operand_fits_ptrdiff_t_offsets_in_bytes(text, ok):
    if ok:
        parse_spec(text)
        return
    with pytest.raises(SpecError, match=r"is too large: operand [abc] .* std::ptrdiff_t") as e:
        parse_spec(text)
    assert f"'{text}'" in str(e.value)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_spec(text):
    with pytest.raises(SpecError, match="empty spec"):
        parse_spec(text)


def test_missing_shape():
    with pytest.raises(SpecError, match="missing") as e:
        parse_spec("matmul")
    assert "\n" not in str(e.value)


def test_unknown_dtype_and_layout_list_the_accepted_ones():
    with pytest.raises(SpecError, match=r"unknown dtype 'i4'.*f32, bf16"):
        parse_spec("matmul 2x2x2 c=i4")
    with pytest.raises(SpecError, match=r"unknown layout 'packed'.*row, col"):
        parse_spec("matmul 2x2x2 c=f32:packed")


def test_colon_without_layout_is_refused():
    with pytest.raises(SpecError, match=r"'b=f32:'.*unknown layout ''"):
        parse_spec("matmul 2x2x2 b=f32:")


def test_spec_error_is_value_error():
    assert issubclass(SpecError, ValueError)


# -- canonical forms ------------------------------------------------------------------------------------
layouts = st.sampled_from(
    [
        row_major(),
        col_major(),
        packed(2, 4),
        packed(2, 8),
        packed(1, 4),
        interleaved(row_major(), 2, 8),
        interleaved(row_major(), 2, 4),
        interleaved(col_major(), 1, 4),
    ]
)
shapes = st.tuples(st.integers(1, 3), st.integers(1, 12), st.integers(1, 12))


@st.composite
def tensor_specs(draw):
    shape = draw(shapes)
    layout = draw(layouts)
    level = draw(st.sampled_from(list(Level)))
    t = TensorSpec(
        shape,
        draw(st.sampled_from(list(DType))),
        layout,
        level,
        len(layout.digits),
        draw(st.sampled_from([None, 8, 16])),
        draw(st.sampled_from([0, 4096, 8192])),
    )
    # Then take a random tile of it (tiles carry the contiguity they inherit).
    tile = tuple(draw(st.integers(1, s)) for s in shape)
    return draw(st.sampled_from([t, t.tile(tile)]))


@settings(max_examples=300, deadline=None)
@given(tensor_specs())
def test_canonicalize_tensor_is_idempotent(t):
    c = t.canonical()
    assert c.canonical() == c
    assert c.shape == t.shape and c.dtype == t.dtype and c.level == t.level
    assert 0 <= c.contig <= len(c.layout.digits)
    if c.level != Level.VRF:
        assert c.vector_size is None
    # Dropping unit digits changes no address.
    for coord in [(0, 0, 0), tuple(s - 1 for s in t.shape), tuple(s // 2 for s in t.shape)]:
        assert c.layout.offset(coord, t.shape) == t.layout.offset(coord, t.shape)
    assert c.lines() == t.lines()


@settings(max_examples=200, deadline=None)
@given(tensor_specs(), tensor_specs(), st.booleans(), st.booleans())
def test_canonicalize_spec_is_idempotent(a, b, accum, serial):
    b2 = dataclasses.replace(b, shape=(a.shape[0], a.shape[2], b.shape[2]))
    c = TensorSpec((a.shape[0], a.shape[1], b.shape[2]), DType.F32, row_major())
    spec = Spec(Matmul(a, b2, c, accum, serial), MemoryLimits(4096, 256, 16))
    once = canonicalize(spec)
    assert canonicalize(once) == once
    assert hash(canonicalize(once)) == hash(once)
    assert once.op.iter_shape == spec.op.iter_shape and once.limits == spec.limits


@settings(max_examples=100, deadline=None)
@given(user_specs)
def test_to_spec_is_canonical(u):
    s = u.to_spec()
    assert canonicalize(s) == s


# -- immutability and hashing ---------------------------------------------------------------------------
def test_specs_are_immutable_and_hashable():
    s = parse_spec("matmul 4x8x16 b=bf16:col accum").to_spec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.op = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.op.a.shape = (1, 1, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        parse_spec("matmul 1x1x1").m = 2
    same = parse_spec("matmul 4x8x16 accum b=bf16:col").to_spec()
    assert s == same and hash(s) == hash(same)
    assert len({s, same, parse_spec("matmul 4x8x16 b=bf16:col").to_spec()}) == 2
    d = {s: 1}
    assert d[same] == 1
    assert hash(parse_spec("matmul 4x8x16")) == hash(parse_spec("matmul  4x8x16 a=f32:row"))


def test_describe_mentions_dtypes_layouts_and_flags():
    s = parse_spec("matmul 2x3x4 b=bf16:col accum serial").to_spec()
    d = s.describe()
    assert d.startswith("matmul(") and "bf16[1x3x4]{col}@GL" in d and d.endswith("accum serial")
