"""Element types of tensors."""

from __future__ import annotations

from enum import Enum


class DType(Enum):
    F32 = "f32"
    BF16 = "bf16"

    def __init__(self, value: str):
        # Plain attributes, not properties: the search reads a tile's bytes hundreds of thousands of times.
        self.bytes: int = {"f32": 4, "bf16": 2}[value]
        self.ctype: str = {"f32": "float", "bf16": "uint16_t"}[value]
