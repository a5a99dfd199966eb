"""``synth --tune K``: measure the K best distinct candidates on this host and keep the fastest.

The candidates are synth/candidates.py's (best-first by model cost, the search's pick first), timed by
tools/measure.py (warm operands, interleaved rounds over fresh processes, medians); another candidate
replaces the pick only when it is more than MIN_GAIN faster. The choice is stored
in the synthesis DB (db/tuned.py) with its timings, keyed by namespace, spec and host CPU: the next build
of the same spec with ``--tune`` (K no larger) replays it without measuring. Without a DB it measures
every time.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from morello_build.ir.grammar import format_spec
from morello_build.tools.errors import UserError

MAX_TUNE = 64
# Keep the model's pick unless another candidate is faster by more than this, and (where the timer gives
# quartiles) its slower quartile beats the pick's faster one: on a busy host, near-equal programs trade
# places from run to run, and a switch should be worth its explanation.
MIN_GAIN = 0.03


@dataclass(frozen=True)
class Tuning:
    k: int  # candidates measured
    chosen: int  # index of the chosen one among them (0: the model's pick)
    pick_seconds: float
    chosen_seconds: float
    reused: bool  # read from the DB, not measured now

    def note(self) -> str:
        """The header's line about it: the same whether measured now or read from the DB (same bytes)."""
        if self.chosen == 0:
            return (
                f"tuned on this host: of the {self.k} best candidates by model cost, the model's pick was the "
                f"fastest ({self.pick_seconds * 1e6:.3g} us a call; none beat it by over {MIN_GAIN:.0%} "
                "beyond the noise)."
            )
        return (
            f"tuned on this host: candidate {self.chosen} of the {self.k} best by model cost runs in "
            f"{self.chosen_seconds * 1e6:.3g} us, {self.pick_seconds / self.chosen_seconds:.2f}x faster than "
            f"the model's pick ({self.pick_seconds * 1e6:.3g} us)."
        )


def check_k(k) -> int:
    """A valid --tune K (0: off), or a UserError."""
    text = str(k)
    if not text.isdigit() or int(text) > MAX_TUNE:
        raise UserError(f"--tune '{k}' is not a number of candidates from 0 (off) to {MAX_TUNE}")
    return int(text)


def host_cpu() -> str:
    from morello_build.tools.measure import cpu_name

    return cpu_name()


def measure_programs(user, target, impls) -> list:
    """The default timer: warm timings (tools/measure.Timing: medians and quartiles, in seconds), compiled
    in a temporary directory. A timer may also return plain seconds."""
    from morello_build.tools import measure

    with tempfile.TemporaryDirectory(prefix="morello-tune-") as work:
        exe = measure.build_benchmark(user, target, impls, Path(work))
        clock = measure.default_clock(user)
        return measure.time_programs(exe, len(impls), processes=2, rounds=8, sample_s=0.002, clock=clock)


def _clearly_faster(t, pick) -> bool:
    """Whether timing ``t`` beats the pick's by more than MIN_GAIN and, given quartiles, by more than noise."""
    if float(getattr(pick, "seconds", pick)) <= (1 + MIN_GAIN) * float(getattr(t, "seconds", t)):
        return False
    return not hasattr(t, "q3") or t.q3 < pick.q1


def tune(user, target, k: int, search, *, db: str | None = None, timer=measure_programs):
    """(program, Tuning) for ``user`` on ``target``: the fastest of the ``k`` best candidates, or the
    stored choice. ``search`` is the Search the program was synthesized with (its memo is reused)."""
    from morello_build.db import tuned
    from morello_build.synth.candidates import enumerate_candidates, replay

    spec_text, host = format_spec(user), host_cpu()
    spec = user.to_spec(target.limits())
    # Serial specs' programs do not depend on the thread count: one entry serves every count (as in the DB).
    key_target = replace(target, threads=1) if user.serial else target
    if db is not None:
        entry = tuned.lookup(db, key_target, spec_text, host)
        if entry is not None and entry.k >= k:
            try:
                impl = replay(spec, entry.path, search)
            except (ValueError, IndexError, KeyError):  # a decision this code no longer reads: measure again
                impl = None
            if impl is not None and abs(impl.cost - entry.cost) <= 1e-9 * max(1.0, abs(entry.cost)):
                t = entry.timings
                secs = t["seconds"]
                return impl, Tuning(entry.k, t["chosen"], secs[0], secs[t["chosen"]], True)
    cands = enumerate_candidates(user, target, k, search=search)
    timings = timer(user, target, [c.impl for c in cands])
    secs = [float(getattr(t, "seconds", t)) for t in timings]
    fastest = min(range(len(cands)), key=lambda i: (secs[i], i))
    chosen = fastest if _clearly_faster(timings[fastest], timings[0]) else 0
    result = Tuning(len(cands), chosen, secs[0], secs[chosen], False)
    if db is not None:
        record = dict(seconds=secs, chosen=chosen, costs=[c.cost for c in cands])
        if all(hasattr(t, "q1") for t in timings):
            record["quartiles"] = [[t.q1, t.q3] for t in timings]
        entry = tuned.TunedEntry(k, cands[chosen].path, cands[chosen].cost, record)
        tuned.store(db, key_target, spec_text, host, entry)
    return cands[chosen].impl, result
