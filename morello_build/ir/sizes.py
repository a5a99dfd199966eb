"""The sizes a spec may have: what the generated code can index.

Sizes are C++ ``int`` in the header (``kernel_info``), and the synthesis DB stores shape coordinates in
an ``rtree_i32`` (32-bit integers); offsets are ``std::ptrdiff_t`` (in bytes, once scaled by the element
size), so each operand's bytes must fit in an int64.
"""

from __future__ import annotations

import re
from math import prod

MAX_SIZE = 2**31 - 1
MAX_OPERAND_BYTES = 2**63 - 1


def size_problem(text: str) -> str | None:
    """Why ``text`` is not an accepted size (a positive integer in ASCII digits, at most MAX_SIZE), or None.
    Not ``str.isdigit``/``int``: they take other scripts' digits ('４', '٤') and '²'."""
    if re.fullmatch("[0-9]+", text) is None or int(text) < 1:
        return f"'{text}' is not a positive integer in ASCII digits 0-9"
    if int(text) > MAX_SIZE:
        return f"size {text} is too large (at most {MAX_SIZE:,}, a C++ int)"
    return None


def operand_bytes_problem(shapes, dtypes) -> str | None:
    """Why operands of these shapes and dtypes cannot be addressed, or None."""
    for name, shape, dt in zip("abc", shapes, dtypes):
        if prod(shape) * dt.bytes > MAX_OPERAND_BYTES:
            return (
                f"operand {name} ({'x'.join(map(str, shape))}) has more than {MAX_OPERAND_BYTES:,} bytes, "
                "more than std::ptrdiff_t offsets address"
            )
    return None
