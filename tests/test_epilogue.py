"""Epilogues and the gated pair (issue 22): the grammar, and every ISA's programs against numpy in float64:
compiled and run where this CPU runs the ISA, run by the interpreter where it does not.

The compiled check calls each kernel through its type-erased entry points (NAME_call, NAME_param) from one
small C++ driver: inputs come from .npy-like raw files that numpy wrote, outputs go back to numpy. The
default call, a reverse-order parallel-for and a threaded one must give identical bytes.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from unittest import mock

import ml_dtypes
import numpy as np
import pytest
import shared_search

from morello_build.check.interpret import interpret, reference
from morello_build.check.testing import compile_program, cxx
from morello_build.codegen import emit_header
from morello_build.ir.epilogue import ACTIVATIONS
from morello_build.ir.grammar import SpecError, format_spec, parse_spec
from morello_build.ir.spec import Level
from morello_build.synth import search
from morello_build.synth.actions import SplitPair, enumerate_actions
from morello_build.synth.search import synthesize
from morello_build.target import TARGETS, get_target, runnable_isas
from morello_build.target.kernels.dot import dot_columns, prefetch_offsets
from morello_build.tools.api import header_isa

SPECS = (
    "matmul 1x37x19 bias act=gelu",  # a GEMV, odd sizes
    "matmul 5x7x11 c=bf16 scale colscale bias act=silu residual",  # every term, bf16 output
    "matmul 2x8x9 b=bf16:col batch=2 act=relu residual",  # weights N×K, a batch
    "matmul 2x8x19 a=bf16 b=bf16 c=bf16 scale",
    "gated 1x29x13 b=bf16:col bias act=gelu",  # the FFN's decode GEMV pair
    "gated 4x11x21 c=bf16 act=silu",
    "gated 3x8x7 b=bf16 batch=2 act=relu",
)
# Searched without SplitPair, so that the pair's own dot kernels (dot_*_pair: both B's columns in one loop
# over K) implement them, where the cost model (built-in table) prefers the split for every spec above.
# (K long enough for a loop over K: the loop prefetches B's columns from main memory.)
PAIR_KERNEL_SPECS = (
    "gated 1x69x5 b=bf16:col bias act=gelu",  # dot_bf16_widen_pair
    "gated 1x68x3 b=f32:col act=silu",  # dot_f32_pair
    "gated 1x48x4 a=bf16 b=bf16:col act=relu",  # dot_bf16_dp_pair on avx512_bf16
    # small batches: dot_*_rows_pair (M rows x a column of B1 and one of B2, each A chunk loaded once for both;
    # several columns from main memory: the next ones prefetched into L2)
    "gated 5x400x4 b=bf16:col act=relu",
    "gated 3x300x10 b=f32:col act=silu",
)
U = 2.0**-24


@functools.lru_cache(maxsize=None)
def _program(spec: str, isa: str):
    user = parse_spec(spec)
    target = get_target(isa, threads=2)
    if spec in PAIR_KERNEL_SPECS and target.lanes:  # (scalar targets have no dot kernels)
        with mock.patch.object(search, "enumerate_actions", _without_split):
            impl, _ = synthesize(user.to_spec(), target)
    else:
        impl = shared_search.program(user, target)
    return user, target, impl


def _without_split(spec, target):
    return (a for a in enumerate_actions(spec, target) if not isinstance(a, SplitPair))


def _inputs(user, rng):
    """The operands as numpy arrays of the spec's dtypes (logical shapes, batch first), and the terms."""
    shapes = user.operand_shapes()
    dtypes = [np.float32 if d.value == "f32" else ml_dtypes.bfloat16 for d in user.operand_dtypes()]
    arrays = [rng.uniform(-1, 1, s).astype(dt) for s, dt in zip(shapes[:-1], dtypes)]
    n = user.n
    terms = {
        "scale": np.float32(0.75),
        "colscale": rng.uniform(0.5, 1.5, n).astype(np.float32),
        "bias": rng.uniform(-1, 1, n).astype(np.float32),
        "bias1": rng.uniform(-1, 1, n).astype(np.float32),
        "bias2": rng.uniform(-1, 1, n).astype(np.float32),
        "residual": rng.uniform(-1, 1, shapes[-1]).astype(np.float32),
    }
    return arrays, {t: terms[t] for t in user.epilogue.tensors}


def _tolerance(user, arrays, extras, got, want):
    """Per element: each sum's rounding bound 2(K+2)u·Σ|a||b| carried through the epilogue (the scales, the
    activation's slope, the gate's other factor), a few ulps for the terms and the activation, and one
    bf16 ulp for a bf16 output."""
    a = np.abs(arrays[0].astype(np.float64))
    sums = [a @ np.abs(b.astype(np.float64)) * 2 * (user.k + 2) * U for b in arrays[1:]]
    e = user.epilogue
    slope = ACTIVATIONS[e.act].slope if e.act else 1.0
    if e.pair:
        up = np.abs(arrays[0].astype(np.float64) @ arrays[2].astype(np.float64)) + sums[1] + 2
        gate = np.abs(arrays[0].astype(np.float64) @ arrays[1].astype(np.float64)) + sums[0] + 2
        tol = slope * sums[0] * up + gate * sums[1]
    else:
        scale = (float(extras.get("scale", 1.0))) * np.abs(extras.get("colscale", 1.0))
        tol = slope * scale * sums[0]
    tol = tol + 16 * U * (np.abs(got) + np.abs(want)) + 1e-30
    if user.dtypes[2].value == "bf16":
        tol = tol + 2.0**-7 * np.maximum(np.abs(got), np.abs(want))
    return tol


def _check(user, arrays, extras, got):
    want = reference(user.to_spec(), *arrays, extras=extras).astype(np.float64)
    got = np.asarray(got).astype(np.float64).reshape(want.shape)
    tol = _tolerance(user, arrays, extras, got, want)
    bad = ~(np.abs(got - want) <= tol)
    assert not bad.any(), f"{format_spec(user)}: {bad.sum()} outputs off, e.g. {got[bad][:3]} vs {want[bad][:3]}"


# -- grammar ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", SPECS)
def test_epilogue_specs_round_trip(spec):
    assert format_spec(parse_spec(spec)) == spec


@pytest.mark.parametrize(
    "spec, token",
    [
        ("matmul 4x4x4 act=tanh", "act=tanh"),
        ("matmul 4x4x4 bias accum", "accum"),
        ("matmul 4x4x4 c=f32:col bias", "c=f32:col"),
        ("matmul 4x4x4 bias bias", "bias"),
        ("gated 4x4x4 residual", "residual"),
        ("gated 4x4x4 scale", "scale"),
        ("gated 4x4x4 accum", "accum"),
        ("gemm 4x4x4", "gemm"),
    ],
)
def test_bad_epilogue_tokens_are_named(spec, token):
    with pytest.raises(SpecError) as e:
        parse_spec(spec)
    assert f"'{token}'" in str(e.value) and "\n" not in str(e.value)


def test_gated_defaults_to_gelu_and_prints_it():
    assert format_spec(parse_spec("gated 2x3x4")) == "gated 2x3x4 act=gelu"


# -- programs of the ISAs this CPU cannot run, interpreted (the others are compiled and run below) -----
@pytest.mark.parametrize("isa", [isa for isa in TARGETS if isa not in runnable_isas()])
@pytest.mark.parametrize("spec", SPECS + PAIR_KERNEL_SPECS)
def test_programs_this_cpu_cannot_run_compute_the_epilogue(spec, isa):
    user, _, impl = _program(spec, isa)
    arrays, extras = _inputs(user, np.random.default_rng(1))
    _check(user, arrays, extras, interpret(impl, *arrays, extras=extras))


def test_epilogue_is_applied_at_the_store_never_in_memory():
    """Every node with the epilogue is above the register buffers or the store itself: no loop over k
    carries it, and only store kernels (vstore, scalar_store, vgate, sgate) apply it."""
    from morello_build.ir.impl import Kernel, Loop, walk

    for spec in SPECS:
        for isa in ("avx2", "scalar"):
            _, _, impl = _program(spec, isa)
            for node in walk(impl):
                op = node.spec.op
                if isinstance(node, Loop) and op.epilogue:
                    assert not any(d in op.reduction_dims for d in node.dims), spec
                if isinstance(node, Kernel) and op.epilogue:
                    assert node.name in ("vstore", "scalar_store", "vgate", "sgate"), (spec, node.name)


def test_pair_kernel_specs_use_the_pair_kernels():
    from morello_build.ir.impl import Kernel, walk

    want = {"avx2": "dot_bf16_widen_pair", "avx512_bf16": "dot_bf16_dp_pair"}
    for isa, kernel in want.items():
        _, _, impl = _program(PAIR_KERNEL_SPECS[0 if isa == "avx2" else 2], isa)
        assert kernel in {n.name for n in walk(impl) if isinstance(n, Kernel)}
    _, _, impl = _program(PAIR_KERNEL_SPECS[1], "avx2")
    assert "dot_f32_pair" in {n.name for n in walk(impl) if isinstance(n, Kernel)}
    for spec, kernel in zip(PAIR_KERNEL_SPECS[3:], ("dot_bf16_rows_pair", "dot_f32_rows_pair")):
        user, target, impl = _program(spec, "avx512")
        assert kernel in {n.name for n in walk(impl) if isinstance(n, Kernel)}, spec
        assert "prefetch_l2_here(bp" in emit_header(user, impl, target, name="k"), spec


def test_pair_kernels_prefetch_their_b_columns_from_main_memory():
    """dot_*_pair prefetch every B column they stream from main memory, one load per line in their cost: one
    column of B1 beside one of B2 each prefetch_bytes ahead in its share of the lead, several adjacent ones the
    next kernel's into L2 (dot.b_prefetch_head); a cost table with prefetch_bytes 0 emits and counts none."""
    from dataclasses import replace

    from morello_build.ir.impl import Kernel, walk

    user, target, impl = _program(PAIR_KERNEL_SPECS[0], "avx2")
    off = replace(target, costs=replace(target.costs, prefetch_bytes=0))
    kernel = next(n for n in walk(impl) if isinstance(n, Kernel) and n.name == "dot_bf16_widen_pair")
    op = kernel.spec.op
    assert op.b1.level == op.b2.level == Level.GL
    header = emit_header(user, impl, target, name="k")
    on_lines = [x for x in header.splitlines() if "::prefetch(" in x]
    # the columns of B1 and of B2 of one-column kernels are streams, each with its share of the lead (a line at least)
    kernels = [n.spec.op for n in walk(impl) if isinstance(n, Kernel) and n.name == "dot_bf16_widen_pair"]
    ones = [k for k in kernels if k.iter_shape[3] == 1]
    shares = {max(64, target.costs.prefetch_bytes // dot_columns(k) // 64 * 64) for k in ones}
    assert shares == {prefetch_offsets(target, 64, streams=dot_columns(k))[0] for k in ones}
    assert ones and on_lines and {int(x.rsplit(", ", 1)[1].rstrip(");")) for x in on_lines} == shares
    assert ("::prefetch_l2_here(bp" in header) == any(k.iter_shape[3] > 1 for k in kernels)
    assert "::prefetch(" not in emit_header(user, impl, off, name="k")
    loads = [target.kernel(kernel.name).cost(op, t).get("vec_load") for t in (target, off)]
    assert loads[0] - loads[1] == op.b1.lines() + op.b2.lines()


def _four_column_program(spec: str, kernel: str):
    """``spec``'s program where the search reads 4 columns of B from main memory a kernel (interleaved streams
    made free, as golden-cove's table and a calibration can), 1024 bytes of prefetch lead."""
    from dataclasses import replace

    from morello_build.ir.impl import Kernel, walk

    user = parse_spec(spec)
    base = get_target("avx2", threads=1)
    target = replace(base, costs=replace(base.costs, gl_interleaved=0.0, prefetch_bytes=1024))
    impl, _ = synthesize(user.to_spec(), target)
    ops = [n.spec.op for n in walk(impl) if isinstance(n, Kernel) and n.name == kernel]
    assert ops and all(op.iter_shape[3] == 4 and op.b.level == Level.GL for op in ops)
    return emit_header(user, impl, target, name="k").splitlines(), target


def test_the_prefetch_lead_is_shared_between_columns_read_side_by_side():
    """prefetch_bytes is one stream's lead: a kernel reading 4 columns ahead of its loads prefetches each a quarter
    as far (4 bf16 or f16 columns 1024 bytes ahead each ran 1.15-1.20x the time of 256 each, Zen 3), and never less
    than a line."""
    target = _four_column_program("matmul 1x2048x64 b=f16:col serial", "dot_quant")[1]
    assert prefetch_offsets(target, 32, streams=4) == (256,) and prefetch_offsets(target, 128, streams=32) == (64, 128)


@pytest.mark.parametrize("b, kernel", [("bf16", "dot_bf16_widen"), ("f16", "dot_quant")])
def test_dot_kernels_over_adjacent_2_byte_columns_prefetch_the_next_ones_into_l2(b, kernel):
    """dot_bf16_widen and dot_quant (f16) over 4 adjacent columns from main memory prefetch, as the rows kernels do,
    the next kernel's 4 columns into L2, spread over their loop's trips (dot.b_prefetch_head, quant._prefetch_head:
    bf16 0.76-0.79x the time of each column prefetched ahead in its own stream, 1x2048x16384 on an Emerald Rapids;
    f16 0.85x on 1x2560x10240, Zen 3): 16 KiB ahead for 4 columns of 2048 values, every line of them."""
    lines, _ = _four_column_program(f"matmul 1x2048x64 b={b}:col serial", kernel)
    assert not [x for x in lines if "::prefetch(" in x]
    l2 = [x for x in lines if "::prefetch_l2_here(bp" in x]
    assert l2 and len(l2) % 4 == 0 and all(", 16384 + (" in x for x in l2), l2  # 4 a kernel


@pytest.mark.parametrize("lead", [0, 4096, 16384])
def test_per_channel_dot_quant_streams_its_columns_a_lead_ahead(lead):
    """dot_quant over per-channel columns (one group of K values) from main memory prefetches into L2, a share per
    trip of its chunk loop, the columns after its kernel's (quant.trip_steps), whole kernels further on where
    those are fewer bytes than stream_lead_bytes (quant_int_prefetch.kernels_ahead; 0: the next kernel's). One i8
    column of 2048 a kernel, 1x2048x16384 from DRAM, Emerald Rapids: each column 512 bytes ahead into L1 read at
    0.69 of a read sweep, the stream 4 KiB ahead 1.00."""
    from dataclasses import replace

    from morello_build.ir.impl import Kernel, walk

    user = parse_spec("matmul 1x2048x64 b=i8:col group=channel scales=f32 serial")
    base = get_target("avx512", threads=1)
    target = replace(base, costs=replace(base.costs, stream_lead_bytes=lead))
    impl, _ = synthesize(user.to_spec(), target)
    ops = [n.spec.op for n in walk(impl) if isinstance(n, Kernel) and n.name == "dot_quant"]
    assert ops and all(op.b.level == Level.GL for op in ops)
    n = ops[0].iter_shape[3]
    kernels = max(1, -(-lead // (2048 * n)))  # the next kernel's n columns, or as many kernels as make the lead
    lines = emit_header(user, impl, target, name="k").splitlines()
    values = [x for x in lines if "prefetch_l2_here(bp" in x]
    assert not [x for x in lines if "::prefetch(" in x]
    assert values and all(f", {2048 * (1 + (kernels - 1) * n)} + (" in x for x in values), values[:2]
    chains = max(1, min(4, 8 // n))  # quant.chains: a trip reads chains x 16 values of each column
    per = -(-(2048 * n // 64) // (2048 // 16 // chains))  # a trip's share of the n columns' lines
    assert all(f") / {16 * chains} * {per} + " in x for x in values)
    assert {x.split(f" * {per} + ")[1].split(")")[0] for x in values} == {str(i) for i in range(per)}


@pytest.mark.parametrize("spec", ["matmul 1x200x24 b=bf16:col serial", "matmul 1x96x5 b=q8_0 serial"])
def test_gemv_dot_kernels_read_b_from_main_memory_and_prefetch_it(spec):
    """A GEMV's B columns are read once: no cache view of them is offered (policy._view_pays), so its dot
    kernels (dot_quant for weight formats) see B in main memory and prefetch it (~0.8 of the read sweep
    without, Zen 3); a cost table with prefetch_bytes 0 emits none and counts fewer loads."""
    from dataclasses import replace

    from morello_build.ir.impl import Kernel, MoveImpl, walk

    user, target, impl = _program(spec, "avx2")
    off = replace(target, costs=replace(target.costs, prefetch_bytes=0))
    assert not [n for n in walk(impl) if isinstance(n, MoveImpl) and n.operand == 1]
    kernels = [n for n in walk(impl) if isinstance(n, Kernel) and n.name.startswith("dot_")]
    assert kernels and all(k.spec.op.b.level == Level.GL for k in kernels)
    on, no = emit_header(user, impl, target, name="k"), emit_header(user, impl, off, name="k")
    # each column prefetch_bytes ahead, or (weight formats in several groups) the columns after the kernel's
    # last into L2, a share per group (quant_int_prefetch.step_slots)
    assert "::prefetch(" in on or "::prefetch_l2_here(" in on
    assert "::prefetch(" not in no and "::prefetch_l2_here(" not in no
    op = kernels[0].spec.op
    loads = [target.kernel(kernels[0].name).cost(op, t).get("vec_load") for t in (target, off)]
    assert loads[0] > loads[1]


# -- compiled kernels of every ISA this CPU runs, against numpy -------------------------------------------
_DRIVER = r"""
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>
%(includes)s

struct Reverse {
  template <class F> void operator()(std::size_t b, std::size_t e, F&& f) const {
    for (std::size_t i = e; i > b; --i) f(i - 1);
  }
};
struct Threads {
  template <class F> void operator()(std::size_t b, std::size_t e, F&& f) const {
    std::vector<std::thread> ts;
    for (std::size_t i = b; i < e; ++i) ts.emplace_back([&f, i] { f(i); });
    for (auto& t : ts) t.join();
  }
};
static std::vector<char> slurp(const std::string& path, std::size_t bytes) {
  std::vector<char> v(bytes);
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f || std::fread(v.data(), 1, bytes, f) != bytes) {
    std::printf("cannot read %%s\n", path.c_str());
    std::exit(2);
  }
  std::fclose(f);
  return v;
}
template <class Param, class Call, class CallPf>
static int run(const std::string& dir, int idx, int params, Param param, Call call, CallPf call_pf) {
  std::vector<std::vector<char>> data(params);
  std::vector<void*> args(params);
  int out = -1;
  for (int j = 0; j < params; ++j) {
    const auto& p = param(j);
    const std::size_t bytes = p.elems * (p.dtype ? 2 : 4);
    if (p.role == 1) { data[j].assign(bytes, char(0xFF)); out = j; }  // NaN
    else data[j] = slurp(dir + "/k" + std::to_string(idx) + "_" + std::to_string(j), bytes);
    args[j] = data[j].data();
  }
  call(args.data());
  const std::vector<char> first = data[out];
  int bad = 0;
  call_pf(args.data(), Reverse()); bad += data[out] != first;
  call_pf(args.data(), Threads()); bad += data[out] != first;
  if (bad) std::printf("kernel %%d: a parallel-for changed the result\n", idx);
  FILE* f = std::fopen((dir + "/k" + std::to_string(idx) + "_out").c_str(), "wb");
  std::fwrite(first.data(), 1, first.size(), f);
  std::fclose(f);
  return bad;
}
int main(int, char** argv) {
  int bad = 0;
%(calls)s
  return bad;
}
"""


def _raw(x) -> bytes:
    return np.ascontiguousarray(x).tobytes()


@pytest.mark.skipif(shutil.which(cxx().split()[0]) is None, reason="no C++ compiler")
def test_compiled_kernels_match_numpy_on_every_runnable_isa(tmp_path):
    """Every spec's header on every ISA this CPU runs, as users get it: a level whose header for the spec is a
    lower level's byte for byte (header_isa: avx2_vnni's is avx2's but for aquant=i8, avx512_bf16's avx512's unless
    A and B are bf16) is that level's, compiled once (a third of the translation unit compiled code nobody ships)."""
    isas = [isa for isa in TARGETS if isa in runnable_isas()]
    jobs, includes, calls = [], [], []
    rng = np.random.default_rng(2)
    for isa in isas:
        for spec in SPECS + PAIR_KERNEL_SPECS:
            if header_isa(parse_spec(spec), isa) != isa:
                continue
            i = len(jobs)
            user, target, impl = _program(spec, isa)
            (tmp_path / f"k{i}.hpp").write_text(emit_header(user, impl, target, name="k", namespace=f"t{i}"))
            arrays, extras = _inputs(user, rng)
            stored = [x.swapaxes(-1, -2) if lay == "col" else x for x, lay in zip(arrays, user.operand_layouts())]
            values = [*stored, None, *extras.values()]  # None: C, the output
            for j, x in enumerate(values):
                if x is not None:
                    (tmp_path / f"k{i}_{j}").write_bytes(_raw(x))
            includes.append(f'#include "k{i}.hpp"')
            calls.append(
                f"  bad += run(argv[1], {i}, t{i}::k_info::params, [](int j) {{ return t{i}::k_param(j); }},"
                f" [](void* const* a) {{ t{i}::k_call(a); }},"
                f" [](void* const* a, auto pf) {{ t{i}::k_call(a, pf); }});"
            )
            jobs.append((user, arrays, extras, isa))
    src = tmp_path / "driver.cpp"
    src.write_text(_DRIVER % {"includes": "\n".join(includes), "calls": "\n".join(calls)})
    exe = tmp_path / "driver"
    built = compile_program(src, exe, includes=(tmp_path,))
    assert built.ok, built.output[-6000:]
    r = subprocess.run([str(exe), str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    for i, (user, arrays, extras, isa) in enumerate(jobs):
        assert isa in runnable_isas()
        dt = np.float32 if user.dtypes[2].value == "f32" else ml_dtypes.bfloat16
        got = np.frombuffer((tmp_path / f"k{i}_out").read_bytes(), dtype=dt)
        _check(user, arrays, extras, got)


def test_the_db_keys_epilogues_and_replays_them(tmp_path):
    """A stored epilogue or gated program is found again (not another spec's: the epilogue is in the key) and
    gives the same header; plain and epilogue specs of one shape get their own programs."""
    from morello_build.tools.api import synthesize_header

    db = str(tmp_path / "synth.db")
    specs = ("gated 1x40x12 b=bf16:col bias", "matmul 1x40x12 b=bf16:col bias act=silu", "matmul 1x40x12 b=bf16:col")
    first = [synthesize_header(s, isa="avx2", threads=2, db=db) for s in specs]
    again = [synthesize_header(s, isa="avx2", threads=2, db=db) for s in specs]
    assert first == again and len(set(first)) == 3
    assert "vgate" in first[0] or "sgate" in first[0]
    assert first[1].count("silu(") > first[2].count("silu(")  # the store calls it
