"""The ISA facts codegen uses (vector width and type, helper library, target attribute, run-time CPU
check) are fields of the Target (target/__init__.py); the helper libraries themselves are Jinja templates
(templates/isa_*.hpp.j2) sharing one vocabulary, so microkernels are written once for every vector ISA.

``IsaInfo`` names what lower.py's ``info`` is: the Target itself.
"""
from __future__ import annotations

from morello_build.target import Target as IsaInfo

__all__ = ["IsaInfo"]
