"""`morello-build vendor`: headers plus a manifest into a source tree, and --check for staleness."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess

import pytest

from morello_build import __version__
from morello_build.target import get_target
from morello_build.tools.cli import main
from morello_build.tools.vendor import MANIFEST_NAME, default_name

SMALL = "matmul 2x4x8"
GEMV = "matmul 1x16x16 a=f32 b=bf16:col c=f32"


def vendor(*args) -> int:
    return main(["vendor", *map(str, args)])


def test_vendor_writes_headers_and_manifest(tmp_path, capsys):
    out = tmp_path / "third_party" / "morello"
    assert vendor("--out", out, SMALL, GEMV) == 0
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert manifest["generator"] == "morello-build" and manifest["generator_version"] == __version__
    native = get_target("native").isa
    names = [default_name(SMALL), default_name(GEMV)]
    assert names == ["matmul_2x4x8", "matmul_1x16x16_b_bf16_col"]
    assert [k["name"] for k in manifest["kernels"]] == names
    for k, spec in zip(manifest["kernels"], [SMALL, GEMV]):
        text = (out / k["header"]).read_text()
        assert k["spec"] == spec and k["namespace"] == "morello" and k["generator_version"] == __version__
        assert k["isa"] == native != "native"  # resolved: the manifest does not depend on the machine
        assert k["threads"] == get_target("native").threads  # resolved too: --check elsewhere regenerates it
        assert k["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert f"void {k['name']}(" in text and f"bool {k['name']}_supported()" in text

    assert vendor("--out", out, "--check", SMALL, GEMV) == 0
    assert vendor("--out", out, "--check") == 0  # the kernels of DIR's manifest
    assert "up to date: 2 header(s)" in capsys.readouterr().out


def test_vendor_is_idempotent(tmp_path):
    out = tmp_path / "v"
    assert vendor("--out", out, "--isa", "avx2", "--threads", 16, "--name", "gemv", "--namespace", "eng::k", GEMV) == 0
    files = sorted(out.iterdir())
    mtimes = [p.stat().st_mtime_ns for p in files]
    assert vendor("--out", out) == 0  # regenerate from the manifest: same bytes, nothing rewritten
    assert [p.stat().st_mtime_ns for p in files] == mtimes
    entry = json.loads((out / MANIFEST_NAME).read_text())["kernels"][0]
    assert entry["name"] == "gemv" and entry["namespace"] == "eng::k" and entry["isa"] == "avx2"
    assert entry["threads"] == 16 and "synthesized for 16 threads" in (out / "gemv.hpp").read_text()
    assert "namespace eng::k {" in (out / "gemv.hpp").read_text()


def test_check_names_stale_headers(tmp_path, capsys):
    out = tmp_path / "v"
    assert vendor("--out", out, SMALL, GEMV) == 0
    small = out / "matmul_2x4x8.hpp"
    gemv = out / "matmul_1x16x16_b_bf16_col.hpp"
    capsys.readouterr()

    # Edited by hand.
    small.write_text(small.read_text() + "// local change\n")
    assert vendor("--out", out, "--check") == 1
    err = capsys.readouterr().err
    assert f"stale: {small}: edited since it was vendored" in err and str(gemv) not in err

    # Different from what this generator produces (the manifest agrees with the file: e.g. an old generator).
    manifest_path = out / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text())
    manifest["kernels"][0]["sha256"] = hashlib.sha256(small.read_bytes()).hexdigest()
    manifest["kernels"][0]["generator_version"] = "0.0.1"
    manifest_path.write_text(json.dumps(manifest))
    assert vendor("--out", out, "--check") == 1
    err = capsys.readouterr().err
    assert f"stale: {small}: differs from what morello-build {__version__} generates (vendored with 0.0.1)" in err

    # Missing.
    assert vendor("--out", out) == 0
    gemv.unlink()
    assert vendor("--out", out, "--check") == 1
    assert f"stale: {gemv}: missing" in capsys.readouterr().err

    # Up to date again after vendoring.
    assert vendor("--out", out) == 0
    assert vendor("--out", out, "--check") == 0


def test_check_against_changed_spec(tmp_path, capsys):
    out = tmp_path / "v"
    assert vendor("--out", out, "--name", "k", SMALL) == 0
    assert vendor("--out", out, "--check", "--name", "k", "matmul 2x4x16") == 1
    assert f"stale: {out / 'k.hpp'}: differs from what morello-build" in capsys.readouterr().err


def test_manifest_input(tmp_path):
    spec_file = tmp_path / "kernels.json"
    spec_file.write_text(
        json.dumps(
            {
                "kernels": [
                    {"name": "gemv", "namespace": "gemma", "spec": GEMV, "isa": "scalar"},
                    SMALL,  # a bare spec string: default name
                    {"spec": "matmul 2x2x2 accum", "header": "sub/acc.hpp", "name": "acc"},
                ]
            }
        )
    )
    out = tmp_path / "v"
    assert vendor("--out", out, "--manifest", spec_file) == 0
    assert (out / "gemv.hpp").is_file() and (out / "matmul_2x4x8.hpp").is_file() and (out / "sub" / "acc.hpp").is_file()
    kernels = json.loads((out / MANIFEST_NAME).read_text())["kernels"]
    assert [(k["name"], k["namespace"], k["header"]) for k in kernels] == [
        ("gemv", "gemma", "gemv.hpp"),
        ("matmul_2x4x8", "morello", "matmul_2x4x8.hpp"),
        ("acc", "morello", "sub/acc.hpp"),
    ]
    assert kernels[0]["isa"] == "scalar"
    assert vendor("--out", out, "--check", "--manifest", spec_file) == 0


@pytest.mark.parametrize(
    "args,message",
    [
        (["matmul 4x8"], "bad spec token '4x8'"),
        (["--name", "k", SMALL, GEMV], "--name needs exactly one SPEC"),
        (["--name", "1k", SMALL], "kernel name '1k' is not a valid C++ identifier"),
        (["--namespace", "a::", SMALL], "namespace 'a::' has an empty part"),
        (["--isa", "avx9", SMALL], "unknown ISA 'avx9'"),
        (["--threads", "0", SMALL], "threads must be an integer from 1 to 1024"),
        (["--manifest", "/nonexistent/kernels.json"], "cannot read manifest /nonexistent/kernels.json"),
        ([], "nothing to vendor"),
    ],
)
def test_user_errors_are_one_line(tmp_path, capsys, args, message):
    assert vendor("--out", tmp_path / "v", *args) == 2
    err = capsys.readouterr().err
    assert err.startswith("morello-build: error: ") and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_two_kernels_one_header_is_an_error(tmp_path, capsys):
    spec_file = tmp_path / "k.json"
    spec_file.write_text(
        json.dumps([{"spec": SMALL, "name": "a", "header": "x.hpp"}, {"spec": GEMV, "name": "b", "header": "x.hpp"}])
    )
    assert vendor("--out", tmp_path / "v", "--manifest", spec_file) == 2
    assert "two kernels write x.hpp" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not installed")
def test_vendored_headers_compile_together(tmp_path):
    out = tmp_path / "v"
    assert vendor("--out", out, SMALL, GEMV) == 0
    src = tmp_path / "use.cpp"
    src.write_text(
        '#include "matmul_2x4x8.hpp"\n#include "matmul_1x16x16_b_bf16_col.hpp"\n'
        "int main() { return morello::matmul_2x4x8_supported()"
        " && morello::matmul_1x16x16_b_bf16_col_supported() ? 0 : 1; }\n"
    )
    subprocess.run(["g++", "-std=c++17", "-fsyntax-only", "-Wall", "-I", str(out), str(src)], check=True)
