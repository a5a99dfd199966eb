"""Layout algebra: how the logical coordinates of a rank-3 tensor map to buffer offsets.

A layout is a sequence of *digits*, outermost first. Digit (dim, div, mod) contributes the value
``(x[dim] // div) % mod`` (``mod`` None: unbounded) to a mixed-radix physical index. This one form
covers row/col-major (one digit per dim, permuted), packed panels (``n // 16`` outer, ``n % 16``
innermost) and odd/even interleaved strips (``k // 32``, ``k % 2``, ``(k // 2) % 16``), so offsets,
contiguity and cache-line estimates are computed once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil, prod

from morello_build.ir.machine import LINE_BYTES


@dataclass(frozen=True, order=True)
class Digit:
    dim: int
    div: int = 1
    mod: int | None = None

    def extent(self, size: int) -> int:
        """Number of distinct values this digit takes over indices [0, size)."""
        whole = ceil(size / self.div)
        return whole if self.mod is None else min(self.mod, whole)

    def c_expr(self, index: str) -> str:
        simple = index.isidentifier() or index.isdigit()
        e = (index if simple else f"({index})") if self.div == 1 else f"(({index}) / {self.div})"
        return e if self.mod is None else f"(({e}) % {self.mod})"


@dataclass(frozen=True, order=True)
class Layout:
    digits: tuple[Digit, ...]

    def __post_init__(self):
        # Specs are hashed constantly by the memo: compute the hash once.
        object.__setattr__(self, "_hash", hash(tuple((d.dim, d.div, d.mod) for d in self.digits)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def name(self) -> str:
        """Compact printable form, e.g. ``row``, ``col`` or ``[b,n/16,k,n%16]``."""
        if all(d.div == 1 and d.mod is None for d in self.digits):
            dims = [d.dim for d in self.digits]
            if dims == sorted(dims):
                return "row"
            if dims[:-2] == sorted(dims[:-2]) and dims[-2:] == [2, 1]:
                return "col"
        parts = []
        for d in self.digits:
            t = "brc"[d.dim] if d.dim < 3 else f"d{d.dim}"
            if d.div > 1:
                t += f"/{d.div}"
            if d.mod:
                t += f"%{d.mod}"
            parts.append(t)
        return "[" + ",".join(parts) + "]"

    # -- structure -------------------------------------------------------------------------------
    def strip(self, dim: int) -> int:
        """The block size along ``dim`` that tiles must not cut (1 for plain permutations)."""
        return max((d.div * d.mod for d in self.digits if d.dim == dim and d.mod), default=1)

    def innermost_unit_dim(self) -> int | None:
        """The dim whose consecutive indices are adjacent in memory (digit div=1 innermost), if any."""
        inner = self.digits[-1]
        return inner.dim if inner.div == 1 else None

    # -- addressing ------------------------------------------------------------------------------
    def extents(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self._digit_extent(d, shape) for d in self.digits)

    @staticmethod
    def _digit_extent(d: Digit, shape: tuple[int, ...]) -> int:
        # An unbounded outer digit of a stripped dim counts whole strips, so buffers are padded.
        return d.extent(shape[d.dim])

    def buffer_elements(self, shape: tuple[int, ...]) -> int:
        """Elements to allocate, including padding to whole strips."""
        return prod(self.extents(shape))

    def strides(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        out, acc = [], 1
        for e in reversed(self.extents(shape)):
            out.append(acc)
            acc *= e
        return tuple(reversed(out))

    def offset(self, coord: tuple[int, ...], shape: tuple[int, ...]) -> int:
        return sum(
            ((coord[d.dim] // d.div) % d.mod if d.mod else coord[d.dim] // d.div) * s
            for d, s in zip(self.digits, self.strides(shape))
        )

    def c_offset(self, coord_exprs: tuple[str, ...], shape: tuple[int, ...]) -> str:
        """C expression of the offset of logical coordinate expressions in a buffer of ``shape``."""
        terms = []
        for d, s, e in zip(self.digits, self.strides(shape), self.extents(shape)):
            if e == 1:
                continue
            t = d.c_expr(coord_exprs[d.dim])
            terms.append(t if s == 1 else f"{t} * {s}")
        return " + ".join(terms) if terms else "0"

    # -- tiles -----------------------------------------------------------------------------------
    def tile_contiguity(self, tile: tuple[int, ...], parent: tuple[int, ...], parent_contig: int) -> int:
        """Innermost digits over which a tile stays dense, given its parent's contiguity.

        A tile is dense over digit i+1 only if it covers digit i completely (as its parent did).
        """
        n = len(self.digits)
        contig = 0
        for i in range(n - 1, -1, -1):
            if contig >= parent_contig:
                break
            contig += 1
            d = self.digits[i]
            if self._digit_extent(d, tile) != self._digit_extent(d, parent):
                break
        return contig

    def contiguous_run(self, tile: tuple[int, ...], contig: int) -> int:
        """Elements of the longest dense run of a tile (product of its dense innermost digits)."""
        digits = self.digits[len(self.digits) - contig :] if contig else ()
        return max(1, prod(self._digit_extent(d, tile) for d in digits))

    def cache_lines(self, tile: tuple[int, ...], contig: int, elem_bytes: int) -> int:
        """Estimated cache lines a tile touches: runs times lines per run (alignment ignored)."""
        elems = self.buffer_elements(tile)  # padded strips: a partial last strip is still one run
        run = self.contiguous_run(tile, contig)
        runs = ceil(elems / run)
        return runs * ceil(run * elem_bytes / LINE_BYTES)

    def is_unit_stride_run(self, tile: tuple[int, ...], contig: int, dim: int) -> bool:
        """Whether the tile's elements are consecutive indices of ``dim`` at consecutive addresses."""
        if any(s != 1 for i, s in enumerate(tile) if i != dim):
            return False
        n = len(self.digits)
        live = [i for i, d in enumerate(self.digits) if d.extent(tile[d.dim]) > 1]
        if not live:
            return True
        d = self.digits[live[0]]
        return len(live) == 1 and d.div == 1 and n - 1 - live[0] < contig

    def canonical(self, shape: tuple[int, ...], contig: int) -> tuple["Layout", int]:
        """Drop digits of extent 1 for this tile; they change neither addresses nor density."""
        keep, new_contig = [], contig
        n = len(self.digits)
        for i, d in enumerate(self.digits):
            if self._digit_extent(d, shape) == 1:
                if i >= n - contig:
                    new_contig -= 1
                continue
            keep.append(d)
        if not keep:
            return SCALAR_LAYOUT, 0
        return Layout(tuple(keep)), max(new_contig, 0)


SCALAR_LAYOUT = Layout(())


def row_major(rank: int = 3) -> Layout:
    return Layout(tuple(Digit(d) for d in range(rank)))


def col_major(rank: int = 3) -> Layout:
    """Last two dims swapped: a K×N matrix stored as N rows of K values."""
    order = list(range(rank - 2)) + [rank - 1, rank - 2]
    return Layout(tuple(Digit(d) for d in order))


def packed(dim: int, strip: int, rank: int = 3) -> Layout:
    """Panels of ``strip`` along ``dim``: panel index after the batch, then the other dim, then the
    offset within the panel innermost (a K×N operand becomes N/strip panels of K×strip)."""
    others = [d for d in range(1, rank) if d != dim]
    digits = [Digit(0), Digit(dim, strip, None)] + [Digit(d) for d in others] + [Digit(dim, 1, strip)]
    return Layout(tuple(digits))


def interleaved(base: Layout, dim: int, strip: int) -> Layout:
    """``base`` with strips of ``dim`` stored evens first, then odds (k%2 outer, (k//2)%(strip/2) inner).

    A strip of bf16 pairs loaded as 32-bit lanes then widens to two f32 vectors, evens and odds,
    by shift and mask, and the matching f32 operand in this layout loads with no lane crossing.
    """
    if base.digits[-1].dim != dim:
        raise ValueError("interleave the innermost dimension only")
    digits = list(base.digits[:-1])
    digits += [Digit(dim, strip, None), Digit(dim, 1, 2), Digit(dim, 2, strip // 2)]
    return Layout(tuple(digits))


NAMED = {"row": row_major(), "col": col_major()}
