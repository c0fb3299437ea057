"""Statuses shared by several plugins."""

from __future__ import annotations

from gangsched.core.framework import Code, Status

__all__ = ["NODE_NOT_FOUND"]

# A NodeInfo whose Node object is absent: the cache knows the name only through bound pods.
NODE_NOT_FOUND = Status(Code.UNRESOLVABLE, "node(s) not found")
