"""The `morello-build` command line: output contracts, the default synthesis DB, one-line errors."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SPEC = "matmul 3x5x7 a=f32 b=bf16:col c=f32"


def cli(*args, env=None, check=True):
    run_env = dict(os.environ, **(env or {}))
    r = subprocess.run([sys.executable, "-m", "morello_build", *args], capture_output=True, text=True, env=run_env)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_explain_prints_a_tree_with_a_cost_on_every_node():
    out = cli("explain", SPEC, "--isa", "avx2", "--db", "none").stdout.splitlines()
    assert out[0].startswith("# matmul 3x5x7 b=bf16:col  (target avx2")
    nodes = out[1:]
    assert len(nodes) > 3
    assert all(re.search(r"\[cost [\d,]+\]", line) for line in nodes), nodes
    depths = {len(line) - len(line.lstrip()) for line in nodes}
    assert len(depths) > 1, "the program is printed as an indented tree"


def test_synth_uses_the_default_db_and_then_answers_from_it(tmp_path):
    env = {"MORELLO_DB": str(tmp_path / "synth.db")}
    first = cli("explain", SPEC, "--isa", "avx2", env=env).stdout
    assert (tmp_path / "synth.db").exists()
    second = cli("explain", SPEC, "--isa", "avx2", env=env).stdout
    assert " 0 specs visited" in second.splitlines()[0]
    assert first.splitlines()[1:] == second.splitlines()[1:]
    stats = cli("db", "stats", "--isa", "avx2", env=env).stdout
    assert "rectangles stored" in stats
    assert "pruned" in cli("db", "prune", "--isa", "avx2", env=env).stdout
    assert cli("db", "verify", "--isa", "avx2", "--sample", "3", env=env).returncode == 0


def test_db_none_writes_nothing(tmp_path):
    env = {"MORELLO_DB": str(tmp_path / "synth.db"), "XDG_CACHE_HOME": str(tmp_path)}
    cli("explain", "matmul 2x2x2", "--isa", "scalar", "--db", "none", env=env)
    assert not any(tmp_path.iterdir())
    r = cli("db", "stats", "--db", "none", check=False)
    assert r.returncode == 2 and "disabled" in r.stderr


def test_an_unusable_default_cache_is_skipped_but_a_named_db_must_work(tmp_path):
    """A sandboxed build with a read-only or missing home still builds (the DB only saves time); a DB
    the user named (--db, $MORELLO_DB) that cannot be created is an error."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "k.hpp"
    r = cli(
        "synth",
        "matmul 2x2x2",
        "--isa",
        "scalar",
        "-o",
        str(out),
        env={"MORELLO_DB": "", "XDG_CACHE_HOME": str(blocker / "cache")},
    )
    assert out.exists()
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("morello-build: warning: "), r.stderr
    r = cli("synth", "matmul 2x2x2", "--isa", "scalar", env={"MORELLO_DB": str(blocker / "synth.db")}, check=False)
    assert r.returncode == 2 and "cannot create synthesis DB" in r.stderr


def test_synth_writes_the_header_only_when_its_bytes_change(tmp_path):
    out = tmp_path / "k.hpp"
    cli("synth", "matmul 2x3x4", "--isa", "avx2", "-o", str(out), "--name", "gemm_small")
    text = out.read_text()
    assert "gemm_small" in text
    os.utime(out, (1, 1))
    cli("synth", "matmul 2x3x4", "--isa", "avx2", "-o", str(out), "--name", "gemm_small")
    assert out.stat().st_mtime == 1, "an unchanged header keeps its timestamp (no rebuilds)"


def test_check_spec_prints_the_canonical_form():
    assert cli("check-spec", "matmul  4x8x2 c=f32:row  a=f32:row").stdout.strip() == "matmul 4x8x2"


@pytest.mark.parametrize(
    "args, words",
    [
        (["check-spec", "matmul 4x4"], "'4x4'"),
        (["check-spec", "matmul 4x4x4 a=f32:"], "'a=f32:'"),
        (["check-spec", "matmul 4x4x4 b=f64"], "unknown dtype 'f64'"),
        (["synth", "matmul 0x4x4"], "'0x4x4'"),
        (["synth", "matmul 4x4x4", "--name", "2bad"], "--name '2bad'"),
        (["synth", "matmul 4x4x4", "--namespace", "a::b-c"], "--namespace 'b-c'"),
        (["synth", "matmul 4x4x4", "--name", "class"], "--name 'class'"),
        (["synth", "matmul 4x4x4", "--name", "gemvé"], "--name 'gemvé'"),
        (["explain", "matmul 4x4x4", "--db", "/dev/null/synth.db"], "/dev/null/synth.db"),
        (["synth", "matmul 99999999999999999999x4x4", "--db", "none"], "'99999999999999999999x4x4'"),
    ],
)
def test_user_errors_are_one_line_exit_2(args, words):
    r = cli(*args, check=False)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("morello-build: error: "), r.stderr
    assert words in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--namespace", "a::"], "--namespace 'a::' has an empty part"),
        (["--namespace", "std"], "--namespace 'std' is reserved"),
        (["--namespace", "std::x"], "--namespace 'std::x' is reserved"),
        (["--namespace", "_x"], "--namespace '_x' is reserved"),
        (["--name", "a__b"], "--name 'a__b' is reserved to the C++ implementation"),
        (["--name", "_Kernel"], "--name '_Kernel' is reserved"),
        (["matmul ４x4x4"], "'４' is not a positive integer in ASCII digits"),
        (["matmul 4x4x4 batch=99999999999"], "'batch=99999999999': size 99999999999 is too large (at most"),
        ([f"matmul {2**31}x2x2", "--db", "x.db"], f"'{2**31}x2x2'"),  # refused before the DB sees it
    ],
)
def test_names_and_sizes_are_one_line_errors(tmp_path, monkeypatch, capsys, args, words):
    from morello_build.tools import cli as main

    monkeypatch.chdir(tmp_path)
    spec = [] if args[0].startswith("matmul") else ["matmul 2x2x2"]
    db = [] if "--db" in args else ["--db", "none"]
    assert main.main(["synth", *spec, *args, "--isa", "scalar", *db]) == 2
    err = capsys.readouterr().err
    assert err.startswith("morello-build: error: ") and err.count("\n") == 1 and words in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_largest_size_is_synthesized_and_stored(tmp_path):
    """At the bound: the header's int sizes and the DB's rtree_i32 coordinates hold it exactly."""
    spec, db = f"matmul {2**31 - 1}x1x1", str(tmp_path / "x.db")
    cli("synth", spec, "--isa", "scalar", "--db", db, "-o", str(tmp_path / "k.hpp"))
    assert f"m = {2**31 - 1}, k = 1" in (tmp_path / "k.hpp").read_text()
    assert " 0 specs visited" in cli("explain", spec, "--isa", "scalar", "--db", db).stdout.splitlines()[0]


def test_an_output_directory_is_named_in_the_error(tmp_path, capsys):
    from morello_build.tools import cli as main

    assert main.main(["synth", "matmul 2x2x2", "--isa", "scalar", "--db", "none", "-o", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"morello-build: error: Is a directory: {tmp_path}\n"
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_a_bad_output_path_loses_nothing(tmp_path):
    keep = tmp_path / "k.hpp"
    keep.write_text("// the user's file\n")
    r = cli("synth", "matmul 2x2x2", "--isa", "scalar", "-o", str(keep / "sub.hpp"), check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert keep.read_text() == "// the user's file\n"


def test_a_long_synthesis_off_a_terminal_logs_a_line_every_half_minute(capsys):
    """A build log (stderr not a terminal) gets a plain line per LOG_PROGRESS_S of synthesis, nothing before."""
    from morello_build.tools.cli import LOG_PROGRESS_S, _progress

    now = [100.0]
    update, stop = _progress(clock=lambda: now[0])
    for t, visited in (
        (10, 256),
        (LOG_PROGRESS_S + 1, 512),
        (LOG_PROGRESS_S + 20, 768),
        (2 * LOG_PROGRESS_S + 2, 1024),
    ):
        now[0] = 100.0 + t
        update(visited)
    stop()
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"morello-build: synthesizing: 512 specs visited, {LOG_PROGRESS_S + 1} s",
        f"morello-build: synthesizing: 1,024 specs visited, {2 * LOG_PROGRESS_S + 2} s",
    ]


def test_explain_into_a_closed_pipe_is_quiet():
    p = subprocess.run(
        f'"{sys.executable}" -m morello_build explain "matmul 8x8x8" --isa avx2 | head -c 1',
        shell=True,
        capture_output=True,
        text=True,
    )
    assert p.stderr == ""


def test_compile_is_exported_lazily():
    code = "import sys, morello_build; f = morello_build.compile; print('numpy' in sys.modules, f.__name__)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split()[-1] == "compile_kernel"
    code = "import sys, morello_build; assert 'compile' in dir(morello_build); print('numpy' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


# -- tools/files.py: the one atomic write ------------------------------------------------------------
def test_write_if_changed_keeps_an_unchanged_file(tmp_path):
    from morello_build.tools.files import write_if_changed

    path = tmp_path / "sub" / "k.hpp"
    assert write_if_changed(path, "a\n") and path.read_text() == "a\n"
    os.utime(path, ns=(1, 1))
    assert not write_if_changed(path, b"a\n") and path.stat().st_mtime_ns == 1  # same bytes: untouched
    assert write_if_changed(path, "b\n") and path.read_text() == "b\n"
    assert [p.name for p in path.parent.iterdir()] == ["k.hpp"]  # no temporary file left


def test_atomic_output_leaves_the_old_file_on_failure(tmp_path):
    from morello_build.tools.files import atomic_output

    path = tmp_path / "k.o"
    path.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(path) as tmp:
        assert tmp.endswith(".o") and os.path.dirname(tmp) == str(tmp_path)
        Path(tmp).write_text("partial")
        raise RuntimeError("compiler failed")
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["k.o"]


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_new_files_follow_the_umask_and_rewrites_keep_the_mode(tmp_path, umask):
    """mkstemp makes 0600 files: a generated header must get what any tool's open() gives it, and keep
    a mode the user chose."""
    from morello_build.tools.files import write_if_changed

    old = os.umask(umask)
    try:
        new, kept = tmp_path / "new.hpp", tmp_path / "kept.hpp"
        write_if_changed(new, "a\n")
        write_if_changed(kept, "a\n")
        os.chmod(kept, 0o644)
        write_if_changed(kept, "b\n")
    finally:
        os.umask(old)
    assert (new.stat().st_mode & 0o777) == 0o666 & ~umask
    assert (kept.stat().st_mode & 0o777) == 0o644 and kept.read_text() == "b\n"
