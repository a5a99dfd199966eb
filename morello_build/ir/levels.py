"""Memory levels, each carrying its facts (registers or memory, cache, limited by specs, allocation),
so that code asks a level instead of listing levels in tuples."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, IntEnum


class Alloc(Enum):
    """How a new buffer at a level is allocated by the generated code."""

    SCRATCH = "scratch block"  # in main memory, from the runtime (too big for a worker thread's stack)
    STACK = "stack array"  # an aligned local array, L1-resident
    REGISTERS = "register array"  # local variables the compiler keeps in registers (indices must be constants)
    NONE = "views only"  # no buffers of its own: data of a slower level, relabelled as resident here


@dataclass(frozen=True)
class LevelFacts:
    registers: bool  # registers, not memory: no address, one thread's (a body using them must be serial)
    cache: bool  # a buffer here may be a view of slower memory (the same data, now resident here)
    limited: bool  # specs limit the bytes here: a MemoryLimits field (and a Peaks entry)
    alloc: Alloc  # how a new (copied) buffer here is allocated


class Level(IntEnum):
    """Memory levels, slowest first, each with its facts (see LevelFacts). GL: main memory (the user's
    arrays, scratch blocks); L2 and L1: data resident in that cache (L2: views of main memory; L1: views
    or buffers); VRF: vector registers; RF: scalar registers. Specs limit no L2 bytes: each L2 view is
    bounded on its own (cost.fits_l2)."""

    GL = 0, LevelFacts(registers=False, cache=False, limited=False, alloc=Alloc.SCRATCH)
    L2 = 1, LevelFacts(registers=False, cache=True, limited=False, alloc=Alloc.NONE)
    L1 = 2, LevelFacts(registers=False, cache=True, limited=True, alloc=Alloc.STACK)
    VRF = 3, LevelFacts(registers=True, cache=False, limited=True, alloc=Alloc.REGISTERS)
    RF = 4, LevelFacts(registers=True, cache=False, limited=True, alloc=Alloc.REGISTERS)

    def __new__(cls, value: int, facts: LevelFacts):
        obj = int.__new__(cls, value)
        obj._value_ = value
        obj.facts = facts
        return obj

    @property
    def is_register(self) -> bool:
        return self.facts.registers

    @property
    def is_memory(self) -> bool:
        """Addressed by pointer (main memory or a cache-resident buffer)."""
        return not self.facts.registers

    @property
    def is_cache(self) -> bool:
        return self.facts.cache

    @property
    def limited(self) -> bool:
        return self.facts.limited

    @property
    def parallel_tileable(self) -> bool:
        """Whether a parallel loop may tile a buffer here: registers belong to one thread."""
        return not self.facts.registers

    @property
    def alloc(self) -> Alloc:
        return self.facts.alloc

    @property
    def has_memory_buffers(self) -> bool:
        """Whether a new buffer in memory (a copy, not a view) may live here: GL (scratch) and L1."""
        return self.facts.alloc in (Alloc.SCRATCH, Alloc.STACK)
