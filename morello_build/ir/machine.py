"""Memory-system facts that the spec algebra needs before any target is chosen.

Specs are built, tiled and canonicalized without a target (the memo and the DB key them by spec alone),
so line counts, stride classes and the canonical form use these values. Every x86 target shares them;
``Target`` (target/__init__.py) carries each as a field and refuses values that differ, so a target
with another line size or alias period would first have to pass its values to the spec algebra.
"""

from __future__ import annotations

LINE_BYTES = 64  # a cache line (layout.cache_lines, TensorSpec.lines)
ALIAS_MIN = 4096  # the L1 set period of x86 cores (32 KiB 8-way, 48 KiB 12-way): runs this far apart collide
ALIAS_MAX = 1 << 20  # a larger stride class would change no cost decision (L2 set periods are smaller)
L2_WAYS = 16  # ways of an L2 set (the canonical form of a matmul's output depends on it: spec.OUTPUT_ALIAS_RUNS)

# Limits of a spec built without a target (tests, the bare spec API): an L1 of 48 KiB, 32 vector
# registers of 64 bytes and 16 scalar registers of 4 bytes. Targets pass their own (Target.limits).
DEFAULT_LIMITS = (48 * 1024, 32 * 64, 16 * 4)
