"""`morello-build vendor`: copy generated headers and a manifest into a source tree, or check them.

    morello-build vendor --out third_party/morello "matmul 1x2048x16384 a=f32 b=bf16:col c=f32" --name gemv
    morello-build vendor --out DIR --manifest kernels.json      # kernels listed in a manifest
    morello-build vendor --out DIR                              # regenerate DIR/morello-manifest.json's kernels
    morello-build vendor --out DIR --check                      # exit 1 naming every stale header

The manifest (``DIR/morello-manifest.json``) lists, per kernel: name, namespace, spec, isa, header file,
generator version and the sha256 of the header. ``--manifest`` reads the same format (only ``spec`` is
required per kernel; ``name``, ``namespace``, ``isa``, ``db`` and ``header`` are optional), so a manifest
written by this command can be fed back to it. ``--isa native`` is resolved to this machine's ISA
before anything is written, so that the vendored headers and ``--check`` do not depend on the machine.

``--check`` regenerates every kernel of the manifest in memory and compares bytes: a header is stale
when it is missing, edited since vendoring (its sha256 differs from the manifest) or differs from what
this generator produces (a new generator version, or a changed spec in ``--manifest``/arguments).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

MANIFEST_NAME = "morello-manifest.json"
FORMAT = 1


class VendorError(ValueError):
    """A user mistake (bad manifest, bad name): the CLI reports it as one line, exit status 2."""


@dataclass(frozen=True)
class Kernel:
    name: str
    namespace: str
    spec: str
    isa: str
    header: str
    db: str | None = None
    threads: int = 2  # resolved: what the program was synthesized for
    profile: str | None = None  # the cost profile (None: $MORELLO_PROFILE, else the host's)

    def manifest_entry(self, text: str, version: str) -> dict:
        profile = {"profile": self.profile} if self.profile else {}
        return {
            "name": self.name,
            "namespace": self.namespace,
            "spec": self.spec,
            "isa": self.isa,
            "threads": self.threads,
            **profile,
            "header": self.header,
            "generator_version": version,
            "sha256": sha256(text),
        }


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def default_name(spec: str) -> str:
    """A C identifier from the canonical spec: "matmul 1x2048x16384 b=bf16:col" -> matmul_1x2048x16384_b_bf16_col."""
    from morello_build.ir.grammar import parse_spec

    canonical = str(parse_spec(spec))
    return re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9]", "_", canonical)).strip("_")


def resolve_isa(isa: str) -> str:
    from morello_build.tools.api import resolve_isa

    return resolve_isa(isa)


def resolve_threads(threads) -> int:
    """The thread count recorded in the manifest: as given, else this machine's CPUs (target.get_target)."""
    from morello_build.target import get_target

    try:
        return get_target("scalar", threads=threads).threads
    except ValueError as e:
        raise VendorError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = "Write generated headers plus a manifest into a source tree, or check them (--check)."
    parser.add_argument("specs", nargs="*", metavar="SPEC", help="kernel specs (each becomes <name>.hpp)")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the headers and " + MANIFEST_NAME)
    parser.add_argument(
        "--manifest",
        metavar="FILE",
        help=f"read the kernels from this manifest (default with no SPEC: DIR/{MANIFEST_NAME})",
    )
    parser.add_argument("--check", action="store_true", help="verify instead of writing: exit 1 if any header is stale")
    parser.add_argument("--name", help="C++ function name (one SPEC only; default: derived from the spec)")
    parser.add_argument("--namespace", default=None, help="C++ namespace (default: morello)")
    parser.add_argument("--isa", default=None, help="instruction set for SPEC arguments (default: native, resolved)")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="threads to synthesize for (default: the manifest's, else this machine's CPUs; recorded)",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="synthesis database (default: $MORELLO_DB, else the per-user cache; 'none' disables it)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="FILE|NAME",
        help="cost profile (default: the manifest's, else $MORELLO_PROFILE, else host; recorded when given)",
    )


def _kernels_from_args(args) -> list[Kernel]:
    if args.name and len(args.specs) != 1:
        raise VendorError("--name needs exactly one SPEC (use --manifest for several named kernels)")
    out = []
    for spec in args.specs:
        name = args.name or default_name(spec)
        isa, threads = resolve_isa(args.isa or "native"), resolve_threads(args.threads)
        ns = args.namespace or "morello"
        out.append(Kernel(name, ns, spec, isa, f"{name}.hpp", args.db, threads, args.profile))
    return out


def _kernels_from_manifest(path: Path, args) -> list[Kernel]:
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise VendorError(f"cannot read manifest {path}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise VendorError(f"manifest {path} is not valid JSON: {e}") from None
    entries = data.get("kernels") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise VendorError(f'manifest {path}: expected {{"kernels": [...]}} or a list of kernels')
    out = []
    for i, e in enumerate(entries):
        if isinstance(e, str):
            e = {"spec": e}
        if not isinstance(e, dict) or not isinstance(e.get("spec"), str):
            raise VendorError(f'manifest {path}: kernel #{i + 1} needs a "spec" string')
        name = e.get("name") or default_name(e["spec"])
        out.append(
            Kernel(
                name=name,
                namespace=e.get("namespace") or args.namespace or "morello",
                spec=e["spec"],
                isa=resolve_isa(e.get("isa") or args.isa or "native"),
                header=e.get("header") or f"{name}.hpp",
                db=e.get("db", args.db),
                threads=resolve_threads(args.threads if args.threads is not None else e.get("threads")),
                profile=args.profile or e.get("profile"),
            )
        )
    return out


def _validate(kernels: list[Kernel]) -> None:
    from morello_build.codegen import name_problem, namespace_problem
    from morello_build.ir.grammar import parse_spec

    seen: dict[str, str] = {}
    for k in kernels:
        parse_spec(k.spec)  # a bad spec: SpecError naming the token
        if why := name_problem(k.name):
            raise VendorError(f"kernel name '{k.name}' {why}")
        if problem := namespace_problem(k.namespace):
            raise VendorError(f"namespace '{problem[0]}' {problem[1]}")
        header = Path(k.header)
        if header.is_absolute() or ".." in header.parts or not k.header.endswith((".hpp", ".h")):
            raise VendorError(f"header '{k.header}' must be a relative .hpp/.h path inside --out")
        if k.header in seen:
            raise VendorError(f"two kernels write {k.header}: '{seen[k.header]}' and '{k.spec}'")
        seen[k.header] = k.spec


def _manifest_text(entries: list[dict], version: str) -> str:
    doc = {"generator": "morello-build", "generator_version": version, "format": FORMAT, "kernels": entries}
    return json.dumps(doc, indent=2) + "\n"


def run(args) -> int:
    from morello_build import __version__
    from morello_build.db import resolve_path
    from morello_build.tools.api import synthesize_header
    from morello_build.tools.errors import warn
    from morello_build.tools.files import write_if_changed

    out = Path(args.out)
    manifest_out = out / MANIFEST_NAME
    if args.specs and args.manifest:
        raise VendorError("give SPEC arguments or --manifest, not both")
    if args.specs:
        kernels = _kernels_from_args(args)
    else:
        source = Path(args.manifest) if args.manifest else manifest_out
        if not args.manifest and not source.exists():
            raise VendorError(f"nothing to vendor: no SPEC, no --manifest and no {source}")
        kernels = _kernels_from_manifest(source, args)
    if not kernels:
        raise VendorError("no kernels to vendor")
    _validate(kernels)

    recorded = {}
    if args.check and manifest_out.exists():
        try:
            for e in json.loads(manifest_out.read_text()).get("kernels", []):
                recorded[e.get("header")] = e
        except (json.JSONDecodeError, AttributeError):
            pass

    entries, stale = [], []
    for i, k in enumerate(kernels, 1):
        print(f"[{i}/{len(kernels)}] {k.namespace}::{k.name} ({k.isa}, {k.threads} threads): {k.spec}", file=sys.stderr)
        db = resolve_path(k.db, warn=warn)
        text = synthesize_header(
            k.spec, isa=k.isa, threads=k.threads, name=k.name, namespace=k.namespace, db=db, profile=k.profile
        )
        entries.append(k.manifest_entry(text, __version__))
        path = out / k.header
        if args.check:
            try:
                current = path.read_text()
            except OSError:
                stale.append(f"{path}: missing")
                continue
            old = recorded.get(k.header)
            if old is not None and old.get("sha256") != sha256(current):
                stale.append(f"{path}: edited since it was vendored (sha256 differs from {manifest_out.name})")
            elif current != text:
                why = "differs from what morello-build %s generates" % __version__
                if old is not None and old.get("generator_version") != __version__:
                    why += f" (vendored with {old.get('generator_version')})"
                stale.append(f"{path}: {why}")
        else:
            write_if_changed(path, text)

    manifest_text = _manifest_text(entries, __version__)
    if args.check:
        if not stale and (not manifest_out.exists() or manifest_out.read_text() != manifest_text):
            stale.append(f"{manifest_out}: missing or out of date")
        for s in stale:
            print(f"stale: {s}", file=sys.stderr)
        if stale:
            print(f"morello-build vendor --check: {len(stale)} stale; rerun without --check to update", file=sys.stderr)
            return 1
        print(f"up to date: {len(kernels)} header(s) in {out}")
        return 0
    if manifest_out.exists():
        try:
            previous = {e.get("header") for e in json.loads(manifest_out.read_text()).get("kernels", [])}
        except (json.JSONDecodeError, AttributeError):
            previous = set()
        for header in sorted(h for h in previous - {k.header for k in kernels} if isinstance(h, str)):
            if (out / header).exists():
                print(f"note: {out / header} is no longer in the manifest (left in place)", file=sys.stderr)
    write_if_changed(manifest_out, manifest_text)
    print(f"vendored {len(kernels)} header(s) and {MANIFEST_NAME} into {out}")
    return 0


def main(argv=None) -> int:  # python -m morello_build.tools.vendor (the CLI registers the same arguments)
    p = argparse.ArgumentParser(prog="morello-build vendor")
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
