"""The field readers every wire format shares: an object's fields as the types they must have,
or a :class:`SpecError` naming the field; values shown in messages; timestamps; and what can
still be read of an object that cannot be read at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, NoReturn

__all__ = [
    "EMPTY",
    "Obj",
    "SpecError",
    "as_list",
    "as_map",
    "as_written",
    "identity",
    "integer",
    "nonempty_str",
    "nonempty_strs",
    "not_a_string",
    "scalar_text",
    "str_map",
    "timestamp",
    "unreadable",
]

Obj = Mapping[str, Any]


class SpecError(ValueError):
    pass


def timestamp(value: object) -> float:
    """RFC 3339 to seconds since the epoch; 0.0 when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


EMPTY: Obj = MappingProxyType({})


def as_map(obj: object, field: str) -> Obj:
    if type(obj) is dict:  # what JSON decodes to: no ABC check
        return obj
    if obj is None:
        return EMPTY
    if not isinstance(obj, Mapping):
        raise SpecError(f"{field}: expected an object")
    return obj


def as_list(obj: object, field: str) -> list[Any]:
    if type(obj) is list:
        return obj
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise SpecError(f"{field}: expected a list")
    return obj


def str_map(obj: object, field: str) -> dict[str, str]:
    m = as_map(obj, field)
    if not m:
        return {}
    return {str(k): str(v) for k, v in m.items()}


def nonempty_str(v: object, field: str) -> str:
    """A required, non-empty string (a label key, topology key, gate or object name)."""
    if not isinstance(v, str) or not v:
        raise SpecError(f"{field}: expected a non-empty string, got {as_written(v)}")
    return v


def nonempty_strs(v: object, field: str) -> tuple[str, ...]:
    return tuple(nonempty_str(x, f"{field}[{i}]") for i, x in enumerate(as_list(v, field)))


def as_written(v: object) -> str:
    """``repr`` for error messages, short and safe for any value; JSON's words for null and
    booleans, as the user wrote them."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    try:
        text = repr(v)
    except ValueError:  # an integer too large to print
        return "<an integer too large to print>"
    return text if len(text) <= 80 else text[:77] + "..."


def not_a_string(field: str, got: object) -> NoReturn:
    raise SpecError(f"{field}: expected a string, got {as_written(got)}")


def integer(v: object, field: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{field}: expected an integer, got {as_written(v)}")
    if v < minimum:
        raise SpecError(f"{field}: must be >= {minimum}, got {as_written(v)}")
    if maximum is not None and v > maximum:
        raise SpecError(f"{field}: must be <= {maximum}, got {as_written(v)}")
    return v


def scalar_text(v: object, default: str) -> str:
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, bool):
        return default
    if isinstance(v, int) and v.bit_length() > 64:
        return default
    if isinstance(v, int | float):
        return str(v)
    return default


def identity(obj: object) -> tuple[str, str, str, float]:
    """(namespace, name, uid, creation) read as safely as possible from a broken object."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        meta = {}
    ns = scalar_text(meta.get("namespace"), "default")
    name = scalar_text(meta.get("name"), "")
    uid = scalar_text(meta.get("uid"), "") or f"{ns}/{name}"
    return ns, name, uid, timestamp(meta.get("creationTimestamp"))


def unreadable(e: BaseException) -> str:
    try:
        detail = str(e)
    except ValueError:
        detail = ""
    return f"unreadable object ({type(e).__name__}{': ' + detail[:300] if detail else ''})"
