"""`morello-build` / `python -m morello_build`: synth, explain, check-spec, db, vendor, --cmakedir.

User mistakes end in one line on stderr ("morello-build: error: ...") and exit status 2; synthesis
finding no program exits 3. Tracebacks are for our bugs only.
"""

from __future__ import annotations

import argparse
import sys
import time

from morello_build import __version__
from morello_build.target import ISAS, TARGET_ISAS, microarch
from morello_build.tools import vendor
from morello_build.tools.errors import UserError, warn
from morello_build.tools.files import write_if_changed

LOG_PROGRESS_S = 30  # off a terminal (a build log): a line per this many seconds of a long synthesis


def _progress(clock=time.monotonic):
    """A live counter of specs visited on stderr when it is a terminal; else (a build log) a plain line every
    LOG_PROGRESS_S seconds, so that a long synthesis does not pass for a hang, and a short one prints nothing."""
    if not sys.stderr.isatty():
        return _log_lines(clock), lambda: None
    from rich.console import Console
    from rich.status import Status

    status = Status("synthesizing", console=Console(stderr=True))
    status.start()
    t0 = clock()
    update = lambda n: status.update(f"synthesizing: {n:,} specs visited, {clock() - t0:.0f} s")
    return update, status.stop


def _log_lines(clock):
    start = last = clock()

    def update(visited: int) -> None:
        nonlocal last
        now = clock()
        if now - last >= LOG_PROGRESS_S:
            last = now
            print(
                f"morello-build: synthesizing: {visited:,} specs visited, {now - start:.0f} s",
                file=sys.stderr,
                flush=True,
            )

    return update


def _synthesize(args, header: bool):
    from morello_build import db
    from morello_build.tools import api
    from morello_build.tools.tune import check_k

    path = db.resolve_path(args.db, warn=warn)  # on by default (the per-user cache); `--db none` turns it off
    update, stop = _progress()
    try:
        if header:
            return api.synthesize_header(
                args.spec,
                isa=args.isa,
                threads=args.threads,
                name=args.name,
                namespace=args.namespace,
                db=path,
                progress=update,
                profile=args.profile,
                tune=check_k(args.tune),
            )
        if args.isa == "dispatch":
            return api.synthesize_variants(
                args.spec, threads=args.threads, db=path, progress=update, profile=args.profile
            )
        return api.synthesize_program(
            args.spec, isa=args.isa, threads=args.threads, db=path, progress=update, profile=args.profile
        )
    finally:
        stop()


def cmd_synth(args) -> int:
    _check_names(args.name, args.namespace)
    text = _synthesize(args, header=True)
    if args.output:
        write_if_changed(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


def explain_tree(impl, features: bool, costs) -> str:
    """explain's tree: with ``features``, each node's features and its cycles by port class."""
    from morello_build.ir.impl import format_tree
    from morello_build.synth.cost import describe_parts

    return format_tree(impl, features=features, costs=costs, by_class=lambda p: describe_parts(p, costs.hidden))


def cmd_explain(args) -> int:
    t0 = time.monotonic()
    if args.isa == "dispatch":  # one program per ISA level
        user, variants = _synthesize(args, header=False)
        print(f"# {user}  (dispatch, {time.monotonic() - t0:.2f} s)")
        for v in variants:
            same = f": the {v.code} program" if v.code != v.level else ""
            print(f"## {v.level}{same}")
            if not same:
                print(explain_tree(v.impl, args.features, v.code_target.costs))
        return 0
    user, target, impl, search = _synthesize(args, header=False)
    took = f"{search.visited:,} specs visited, {time.monotonic() - t0:.2f} s"
    print(f"# {user}  (target {target.isa}, {target.threads} threads, costs {target.profile}, {took})")
    print(explain_tree(impl, args.features, target.costs))
    return 0


def cmd_check_spec(args) -> int:
    from morello_build.ir.grammar import parse_spec

    print(parse_spec(args.spec))
    return 0


def cmd_db(args) -> int:
    from morello_build import db
    from morello_build.target import get_target

    path = db.resolve_path(args.db)
    if path is None:
        raise UserError("the synthesis database is disabled ('none'); name one with --db PATH")
    target = get_target(args.isa, threads=args.threads, profile=args.profile)
    if args.action == "prune":
        print(db.prune(path, target))
        return 0
    if args.action == "stats":
        print(db.stats(path, target))
        return 0
    if args.action == "rebuild":
        print(db.rebuild(path, target))
        return 0
    ok, report = db.verify(path, target, sample=args.sample)
    print(report)
    return 0 if ok else 1


def _check_names(name: str, namespace: str) -> None:
    from morello_build.codegen import name_problem, namespace_problem

    if why := name_problem(name):
        raise UserError(f"--name '{name}' {why}")
    if problem := namespace_problem(namespace):
        raise UserError(f"--namespace '{problem[0]}' {problem[1]}")


def _add_synth_options(p, header: bool) -> None:
    p.add_argument("spec", help='kernel spec, e.g. "matmul 1x2048x16384 a=f32 b=bf16:col c=f32"')
    p.add_argument(
        "--isa",
        default="native",
        choices=ISAS,
        help="instruction set (default: this CPU's best; dispatch: one program per ISA level, chosen at run time)",
    )
    _add_threads_option(p)
    add_profile_option(p)
    p.add_argument(
        "--db",
        default=None,
        help="synthesis database (default: $MORELLO_DB, else the per-user cache; 'none' disables it)",
    )
    if header:
        p.add_argument("-o", "--output", help="header file to write (only if its bytes change)")
        p.add_argument("--name", default="kernel", help="C++ function name (default: kernel)")
        p.add_argument("--namespace", default="morello", help="C++ namespace (default: morello)")
        p.add_argument(
            "--tune",
            default="0",
            metavar="K",
            help="compile and time the K best distinct candidate programs on this host and keep the fastest "
            "(stored in the DB: the next build reuses it without measuring); 0 (default): off",
        )


def _threads(text: str) -> int:
    from morello_build.target import MAX_THREADS

    if not text.isdigit() or not 1 <= int(text) <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"'{text}' is not a thread count from 1 to {MAX_THREADS}")
    return int(text)


def _add_threads_option(p) -> None:
    p.add_argument(
        "--threads",
        type=_threads,
        default=None,
        metavar="N",
        help="threads the program is synthesized for: its parallel loop's tasks are split over N "
        "(default: the CPUs this process may run on); the DB keeps results per N",
    )


def add_profile_option(p) -> None:
    p.add_argument(
        "--profile",
        default=None,
        metavar="FILE|NAME",
        help="cost profile: a file from `calibrate`, builtin, host, or a micro-architecture "
        f"({', '.join(microarch.BY_NAME)}); default: $MORELLO_PROFILE, else host",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="morello-build", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"morello-build {__version__}")
    p.add_argument("--cmakedir", action="store_true", help="print the directory of MorelloBuildConfig.cmake")
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("synth", help="synthesize a kernel and write its header")
    _add_synth_options(s, header=True)
    s.set_defaults(func=cmd_synth)
    e = sub.add_parser("explain", help="print the chosen program with the cost of every node")
    _add_synth_options(e, header=False)
    e.add_argument(
        "--features",
        action="store_true",
        help="under each node, the feature counts behind its own cost (synth/cost.py)",
    )
    e.set_defaults(func=cmd_explain)
    c = sub.add_parser("check-spec", help="validate a spec string and print its canonical form")
    c.add_argument("spec")
    c.set_defaults(func=cmd_check_spec)
    d = sub.add_parser("db", help="inspect or check the synthesis database")
    d.add_argument(
        "action",
        choices=("stats", "verify", "rebuild", "prune"),
        help="stats: size and compression; verify: re-derive a sample; rebuild: start empty; "
        "prune: drop the entries of other morello-build versions or code",
    )
    d.add_argument("--db", default=None, help="database path (default: $MORELLO_DB, else the per-user cache)")
    d.add_argument("--isa", default="native", choices=TARGET_ISAS)
    _add_threads_option(d)
    add_profile_option(d)
    d.add_argument("--sample", type=int, default=20, help="entries re-derived by verify")
    d.set_defaults(func=cmd_db)
    cal = sub.add_parser("calibrate", help="measure this host and write a cost profile for --profile")
    from morello_build.tools import calibrate

    calibrate.add_arguments(cal)
    cal.set_defaults(func=calibrate.calibrate)
    v = sub.add_parser("vendor", help="copy generated headers and a manifest into a source tree")
    vendor.add_arguments(v)
    v.set_defaults(func=vendor.run)
    return p


def main(argv=None) -> int:
    from morello_build.ir.grammar import SpecError
    from morello_build.synth.search import NoProgram, keep_out_of_collections

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.cmakedir:
            from morello_build.tools.cmake_dir import cmake_dir

            print(cmake_dir())
            return 0
        if not getattr(args, "func", None):
            parser.print_usage(sys.stderr)
            return 2
        return args.func(args)
    except (SpecError, UserError, ValueError) as e:
        print(f"morello-build: error: {e}", file=sys.stderr)
        return 2
    except NoProgram as e:
        print(f"morello-build: error: synthesis failed for '{args.spec}': {e}", file=sys.stderr)
        return 3
    except BrokenPipeError:
        # `morello-build explain ... | head`: the reader left; say nothing, like other Unix tools.
        sys.stdout = None
        return 141
    except OSError as e:
        print(f"morello-build: error: {e.strerror or e}: {e.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    finally:
        keep_out_of_collections()  # the process ends next: its final collection would traverse the memos
