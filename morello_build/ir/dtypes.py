"""Element types of tensors."""

from __future__ import annotations

from enum import Enum


class DType(Enum):
    F32 = "f32"
    BF16 = "bf16"

    @property
    def bytes(self) -> int:
        return {"f32": 4, "bf16": 2}[self.value]

    @property
    def ctype(self) -> str:
        return {"f32": "float", "bf16": "uint16_t"}[self.value]
