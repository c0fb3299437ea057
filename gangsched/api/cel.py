"""CEL selectors of Dynamic Resource Allocation (DeviceClass and ResourceClaim selectors) into
the core's :class:`~gangsched.core.resourceclaims.Selector`.

An expression sees one variable, ``device``, as kube-scheduler's structured allocator shows it:

- ``device.driver``: the driver's name;
- ``device.attributes[<domain>]``: a map of the device's attributes under that domain, by their
  short names (``device.attributes["gpu.nvidia.com"].productName``); the core keys them by
  their fully qualified names (``gpu.nvidia.com/productName``), regrouped here; values are
  strings, integers, booleans, or versions (semver values);
- ``device.capacity[<domain>]``: the same for capacities, as quantities;
- a domain the device has nothing under is an empty map (as in Kubernetes), for every domain the
  expression names as a string literal.

Besides the standard CEL operators, macros (``has``, ``all``, ``exists``, ``exists_one``,
``map``, ``filter``) and functions (``size``, ``contains``, ``startsWith``, ``endsWith``,
``matches``, ``int``, ``uint``, ``double``, ``string``, ``bytes``, ``dyn``), Kubernetes' quantity
and semver libraries are supported (``quantity``, ``isQuantity``, ``sign``, ``add``, ``sub``,
``isInteger``, ``asInteger``, ``asApproximateFloat``, ``semver``, ``isSemver``, ``major``,
``minor``, ``patch``, and on both ``isGreaterThan``, ``isLessThan``, ``compareTo``). Any other
function refuses the expression at compile time, by name (``function lowerAscii is not
supported``), so the claim or class can be refused naming it.

A runtime error for a device (a missing attribute, a type mismatch, an invalid quantity) makes
the selector not match that device, as in kube-scheduler. Evaluation is by the
``common-expression-language`` library (Rust); quantities and versions, which it has no types
for, are maps with one tagged key, and the functions above are Python callbacks over them that
never raise (a failure is a value the library cannot convert: an evaluation error).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import cel

from gangsched.core.quantity import QuantityError, parse_quantity
from gangsched.core.resourceclaims import Device, Selector, Version

__all__ = [
    "MAX_EXPRESSION_LENGTH",
    "SUPPORTED_FUNCTIONS",
    "compile_selector",
    "parse_semver",
]

# Kubernetes' limit on a selector's expression (resource.k8s.io CELSelectorExpressionMaxLength).
MAX_EXPRESSION_LENGTH = 10 * 1024

# What the library reports for operators and macros (``Program.functions()``).
_OPERATORS = frozenset(
    {
        "!_",
        "-_",
        "_+_",
        "_-_",
        "_*_",
        "_/_",
        "_%_",
        "_==_",
        "_!=_",
        "_<_",
        "_<=_",
        "_>_",
        "_>=_",
        "_&&_",
        "_||_",
        "_?_:_",
        "_[_]",
        "@in",
        "@not_strictly_false",
    }
)
_STANDARD = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "int",
        "uint",
        "double",
        "string",
        "bytes",
        "dyn",
    }
)
_QUANTITY = frozenset(
    {"quantity", "isQuantity", "sign", "add", "sub", "isInteger", "asInteger", "asApproximateFloat"}
)
_SEMVER = frozenset({"semver", "isSemver", "major", "minor", "patch"})
_BOTH = frozenset({"isGreaterThan", "isLessThan", "compareTo"})
SUPPORTED_FUNCTIONS = _STANDARD | _QUANTITY | _SEMVER | _BOTH
_ALLOWED = _OPERATORS | SUPPORTED_FUNCTIONS

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1

# ---- values the library has no type for: tagged maps ---------------------------------------
_Q = "@quantity"  # the exact value, as a Fraction's text ("3", "1/2")
_V = "@semver"  # the version, as written (parsed again, cached, when compared)


class _Failure:
    """A callback's failure: the library cannot convert it, so the evaluation fails (a callback
    that raised would also be logged by the library, on every device)."""

    __slots__ = ()


_FAIL = _Failure()


def _quantity_value(q: Fraction) -> dict[str, str]:
    return {_Q: str(q)}


def _as_quantity(v: object) -> Fraction | None:
    if isinstance(v, dict) and len(v) == 1 and isinstance(text := v.get(_Q), str):
        try:
            return Fraction(text) if len(text) <= 200 else None
        except (ValueError, ZeroDivisionError):
            return None
    return None


def _parse_quantity(text: object) -> Fraction | None:
    if not isinstance(text, str):
        return None
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


# ---- semantic versions (semver.org 2.0.0, as github.com/blang/semver parses them) ----------
_NUM = r"0|[1-9][0-9]*"
_PRE = r"0|[1-9][0-9]*|[0-9]*[a-zA-Z-][0-9a-zA-Z-]*"
_SEMVER_RE = re.compile(
    rf"^({_NUM})\.({_NUM})\.({_NUM})"
    rf"(?:-((?:{_PRE})(?:\.(?:{_PRE}))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)
_MAX_VERSION_LENGTH = 256
# (major, minor, patch, pre-release identifiers: ints or strings)
_Semver = tuple[int, int, int, tuple[int | str, ...]]


@lru_cache(maxsize=1024)
def parse_semver(text: str) -> _Semver | None:
    """A semantic version's (major, minor, patch, pre-release) or ``None``: strictly as
    semver.org 2.0.0 writes it (no ``v``, no leading zeros, numbers within 64 bits)."""
    if len(text) > _MAX_VERSION_LENGTH:
        return None
    m = _SEMVER_RE.match(text)
    if m is None:
        return None
    major, minor, patch = int(m[1]), int(m[2]), int(m[3])
    if max(major, minor, patch) > _UINT64_MAX:
        return None
    pre = tuple(int(p) if p.isdigit() else p for p in m[4].split(".")) if m[4] else ()
    return major, minor, patch, pre


def _normalized(text: str) -> str:
    """Kubernetes' ``semver(s, true)``: a leading ``v`` dropped, missing minor and patch
    added as 0, leading zeros of the numbers dropped."""
    core, sep, rest = text.removeprefix("v").partition("-")
    if not sep:
        core, sep, rest = core.partition("+")
    parts = core.split(".")
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        return text
    parts = [str(int(p)) for p in parts] + ["0"] * (3 - len(parts))
    return ".".join(parts) + sep + rest


def _version_of(text: object, normalize: object = False) -> str | None:
    if not isinstance(text, str) or not isinstance(normalize, bool):
        return None
    if normalize and len(text) <= _MAX_VERSION_LENGTH:
        text = _normalized(text)
    return text if parse_semver(text) is not None else None


def _version_value(text: str) -> dict[str, str]:
    # without its build metadata, which neither equality nor order looks at
    return {_V: text.partition("+")[0]}


def _as_version(v: object) -> _Semver | None:
    if isinstance(v, dict) and len(v) == 1 and isinstance(text := v.get(_V), str):
        return parse_semver(text)
    return None


def _pre_key(p: int | str) -> tuple[int, int, str]:
    # numeric identifiers before alphanumeric ones; numbers by value, others by ASCII
    return (0, p, "") if isinstance(p, int) else (1, 0, p)


def _compare_versions(a: _Semver, b: _Semver) -> int:
    if a[:3] != b[:3]:
        return -1 if a[:3] < b[:3] else 1
    pa, pb = a[3], b[3]
    if pa == pb:
        return 0
    if not pa or not pb:  # a version without pre-release ranks above one with
        return 1 if not pa else -1
    ka, kb = [_pre_key(p) for p in pa], [_pre_key(p) for p in pb]
    return -1 if ka < kb else 1


# ---- the callbacks -------------------------------------------------------------------------
def _compare(a: object, b: object) -> int | None:
    qa, qb = _as_quantity(a), _as_quantity(b)
    if qa is not None and qb is not None:
        return (qa > qb) - (qa < qb)
    va, vb = _as_version(a), _as_version(b)
    if va is not None and vb is not None:
        return _compare_versions(va, vb)
    return None


def _compare_to(a: object, b: object) -> object:
    c = _compare(a, b)
    return _FAIL if c is None else c


def _is_greater_than(a: object, b: object) -> object:
    c = _compare(a, b)
    return _FAIL if c is None else c > 0


def _is_less_than(a: object, b: object) -> object:
    c = _compare(a, b)
    return _FAIL if c is None else c < 0


def _quantity(text: object) -> object:
    q = _parse_quantity(text)
    return _FAIL if q is None else _quantity_value(q)


def _is_quantity(text: object) -> object:
    return _FAIL if not isinstance(text, str) else _parse_quantity(text) is not None


def _operand(v: object) -> Fraction | None:
    if isinstance(v, int) and not isinstance(v, bool):
        return Fraction(v)
    return _as_quantity(v)


def _add(a: object, b: object) -> object:
    qa, qb = _as_quantity(a), _operand(b)
    return _FAIL if qa is None or qb is None else _quantity_value(qa + qb)


def _sub(a: object, b: object) -> object:
    qa, qb = _as_quantity(a), _operand(b)
    return _FAIL if qa is None or qb is None else _quantity_value(qa - qb)


def _sign(a: object) -> object:
    q = _as_quantity(a)
    return _FAIL if q is None else (q > 0) - (q < 0)


def _is_integer(a: object) -> object:
    q = _as_quantity(a)
    return _FAIL if q is None else q.denominator == 1 and _INT64_MIN <= q <= _INT64_MAX


def _as_integer(a: object) -> object:
    q = _as_quantity(a)
    if q is None or q.denominator != 1 or not _INT64_MIN <= q <= _INT64_MAX:
        return _FAIL
    return int(q)


def _as_approximate_float(a: object) -> object:
    q = _as_quantity(a)
    return _FAIL if q is None else float(q)


def _semver(text: object, normalize: object = False) -> object:
    version = _version_of(text, normalize)
    return _FAIL if version is None else _version_value(version)


def _is_semver(text: object, normalize: object = False) -> object:
    if not isinstance(text, str) or not isinstance(normalize, bool):
        return _FAIL
    return _version_of(text, normalize) is not None


def _part(i: int) -> Callable[[object], object]:
    def part(v: object) -> object:
        version = _as_version(v)
        return _FAIL if version is None else version[i]

    return part


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "sign": _sign,
    "add": _add,
    "sub": _sub,
    "isInteger": _is_integer,
    "asInteger": _as_integer,
    "asApproximateFloat": _as_approximate_float,
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "compareTo": _compare_to,
}
assert set(_FUNCTIONS) == _QUANTITY | _SEMVER | _BOTH


# ---- the device, as CEL sees it -------------------------------------------------------------
def _grouped(
    values: Mapping[str, object], convert: Callable[[object], object], domains: tuple[str, ...]
) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {d: {} for d in domains}
    for name, value in values.items():
        domain, _, short = name.rpartition("/")
        converted = convert(value)
        if converted is not _FAIL:  # left out: an expression that reads it fails
            out.setdefault(domain, {})[short] = converted
    return out


def _attribute(v: object) -> object:
    if isinstance(v, Version):
        return _version_value(v) if parse_semver(v) is not None else _FAIL
    if isinstance(v, int) and not isinstance(v, bool) and not _INT64_MIN <= v <= _INT64_MAX:
        return _FAIL
    return v


def _capacity(v: object) -> object:
    return _quantity_value(Fraction(v)) if isinstance(v, int) else v


def _device_context(device: Device, domains: tuple[str, ...]) -> cel.Context:
    value = {
        "driver": device.driver,
        "attributes": _grouped(device.attributes, _attribute, domains),
        "capacity": _grouped(device.capacity, _capacity, domains),
    }
    import cel  # (imported at first use: the library brings its command-line tool's packages)

    return cel.Context(variables={"device": value}, functions=_FUNCTIONS)


# Contexts by device (its identity: the entry holds the device, so the id is not reused) and
# the domains the expression names: building one costs more than evaluating with it.
_MAX_CONTEXTS = 8192
_contexts: dict[tuple[int, tuple[str, ...]], tuple[Device, cel.Context]] = {}


def _context(device: Device, domains: tuple[str, ...]) -> cel.Context:
    key = (id(device), domains)
    hit = _contexts.get(key)
    if hit is not None and hit[0] is device:
        return hit[1]
    if len(_contexts) >= _MAX_CONTEXTS:
        _contexts.clear()
    ctx = _device_context(device, domains)
    _contexts[key] = (device, ctx)
    return ctx


# String literals that could be domains (DNS subdomains): each an empty map when the device has
# nothing under it.
_LITERAL = re.compile(r""""([^"\\\n]*)"|'([^'\\\n]*)'""")
_DOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _domains(expression: str) -> tuple[str, ...]:
    found = {a or b for a, b in _LITERAL.findall(expression)}
    return tuple(sorted(d for d in found if _DOMAIN.match(d)))


def _matcher(program: cel.Program, domains: tuple[str, ...]) -> Callable[[Device], bool]:
    def matches(device: Device) -> bool:
        # only "missing" domains get an empty map; the device's own come from the device
        missing = tuple(d for d in domains if not _has_domain(device, d))
        try:
            return program.execute(_context(device, missing)) is True
        except Exception:  # any evaluation error: the device does not match
            return False

    return matches


def _has_domain(device: Device, domain: str) -> bool:
    prefix = domain + "/"
    return any(n.startswith(prefix) for n in device.attributes) or any(
        n.startswith(prefix) for n in device.capacity
    )


def _parse_error(e: BaseException) -> str:
    try:
        text = str(e)
    except ValueError:
        text = ""
    for line in text.splitlines():
        if "ERROR:" in line:
            text = line.split("ERROR:", 1)[1].strip().removeprefix("<input>:")
            break
    text = text.strip() or type(e).__name__
    return f"cannot parse the CEL expression: {text[:200]}"


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Selector | str:
    """The selector for a CEL expression, or why it cannot be one: unparsable, too long, or a
    function that is not supported (named). Compiled once per expression text."""
    if not isinstance(expression, str):
        return "the CEL expression is not a string"
    if not expression.strip():
        return "the CEL expression is empty"
    if len(expression) > MAX_EXPRESSION_LENGTH:
        return (
            f"the CEL expression is longer than {MAX_EXPRESSION_LENGTH} characters "
            f"({len(expression)})"
        )
    import cel  # (imported at first use: the library brings its command-line tool's packages)

    try:
        program = cel.compile(expression)
        functions = program.functions()
    except Exception as e:
        return _parse_error(e)
    unsupported = sorted(set(functions) - _ALLOWED)
    if len(unsupported) == 1:
        return f"function {unsupported[0]} is not supported"
    if unsupported:
        return f"functions {', '.join(unsupported)} are not supported"
    return Selector(expression, _matcher(program, _domains(expression)))
