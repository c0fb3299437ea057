"""Dynamic Resource Allocation objects (``resource.k8s.io/v1``, JSON) into the core's model
(core/resourceclaims.py): DeviceClasses, ResourceSlices and ResourceClaims.

Nothing here raises on bad input: an object that cannot be read, or that sets a field the core
does not model yet, becomes a :class:`DraError` naming the field (``spec.devices.config: not
supported yet``), so the adapter can refuse what depends on it by name. CEL selectors are
compiled by ``cel.py``; one it refuses refuses the object, naming the selector. docs/dra.md
lists what is read and what is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from gangsched.api.affinity import node_selector_term
from gangsched.api.cel import compile_selector, parse_semver
from gangsched.api.fields import (
    Obj,
    SpecError,
    as_list,
    as_map,
    as_written,
    identity,
    integer,
    nonempty_str,
    timestamp,
    unreadable,
)
from gangsched.core.model import AffinityTerm
from gangsched.core.quantity import QuantityError, parse_quantity
from gangsched.core.resourceclaims import (
    AllocationMode,
    AttributeValue,
    CapacityPolicy,
    Claim,
    ClaimAllocation,
    ConfigEntry,
    CounterTotal,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    DeviceTaint,
    ExactRequest,
    MatchAttribute,
    Selector,
    Toleration,
    Version,
)

_T = TypeVar("_T")

__all__ = [
    "EXTENDED_CLAIM",
    "MAX_COUNT",
    "DraError",
    "PodClaims",
    "ResourceSlice",
    "TaintRule",
    "device_class_from",
    "pod_claims",
    "resource_claim_from",
    "resource_slice_from",
    "taint_rule_from",
]

# The most devices one request may ask (resource.k8s.io AllocationResultsMaxSize).
MAX_COUNT = 32
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class DraError:
    """An object that cannot be used: ``key`` (``namespace/name`` or ``name``) and why, naming
    the field."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """A ResourceSlice: its driver's devices in one pool, on ``node`` (empty when the slice is
    not for one node: each device says where it reaches), or the pool's counter sets
    (``counters``: (set, counter, total)), which a slice carries instead of devices."""

    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node: str
    devices: tuple[Device, ...]
    counters: tuple[tuple[str, str, int], ...] = ()

    @property
    def pool_counters(self) -> tuple[CounterTotal, ...]:
        """The counter sets as the core takes them: each counter with its driver and pool."""
        return tuple((self.driver, self.pool, *c) for c in self.counters)


def _unsupported(field: str) -> SpecError:
    return SpecError(f"{field}: not supported yet")


def _refuse_set(m: Obj, prefix: str, fields: tuple[str, ...]) -> None:
    """Fields the core does not model: set (not null, not empty), the object is refused."""
    for f in fields:
        v = m.get(f)
        if v is not None and v != [] and v != {} and v is not False:
            raise _unsupported(f"{prefix}.{f}")


def _selectors(v: object, field: str) -> tuple[Selector, ...]:
    out: list[Selector] = []
    for i, s in enumerate(as_list(v, field)):
        f = f"{field}[{i}]"
        sel = as_map(s, f)
        if s is None or sel.get("cel") is None:
            raise SpecError(f"{f}.cel: expected an object with an expression")
        cel = as_map(sel.get("cel"), f"{f}.cel")
        expression = cel.get("expression")
        if not isinstance(expression, str):
            raise SpecError(f"{f}.cel.expression: expected a string, got {as_written(expression)}")
        compiled = compile_selector(expression)
        if isinstance(compiled, str):
            raise SpecError(f"{f}.cel.expression: {compiled}")
        out.append(compiled)
    return tuple(out)


def _name(obj: object) -> str:
    _, name, _, _ = identity(obj)
    return name


def _request_names(c: Obj, field: str, requests: set[str]) -> tuple[str, ...]:
    """``requests``: names of the claim's requests (``<request>`` or
    ``<request>/<sub-request>``), each naming one that exists."""
    names = tuple(
        nonempty_str(x, f"{field}.requests[{i}]")
        for i, x in enumerate(as_list(c.get("requests"), f"{field}.requests"))
    )
    for i, n in enumerate(names):
        if n.split("/", 1)[0] not in requests:
            raise SpecError(f"{field}.requests[{i}]: no request {as_written(n)}")
    return names


def _config(v: object, field: str, requests: set[str] | None) -> tuple[ConfigEntry, ...]:
    """``config[]``: opaque driver parameters, kept as written for the allocation. With
    ``requests`` (a claim's), each entry's ``requests`` must name one (``<request>`` or
    ``<request>/<sub-request>``)."""
    out: list[ConfigEntry] = []
    for i, raw in enumerate(as_list(v, field)):
        f = f"{field}[{i}]"
        c = as_map(raw, f)
        names = () if requests is None else _request_names(c, f, requests)
        if c.get("opaque") is None:
            raise SpecError(f"{f}.opaque: expected an object (the only kind of configuration)")
        opaque = as_map(c.get("opaque"), f"{f}.opaque")
        driver = nonempty_str(opaque.get("driver"), f"{f}.opaque.driver")
        params = opaque.get("parameters")
        if not isinstance(params, dict):
            raise SpecError(f"{f}.opaque.parameters: expected an object, got {as_written(params)}")
        out.append(ConfigEntry(driver, json.dumps(params, separators=(",", ":")), names))
    return tuple(out)


# ---- DeviceClass ----------------------------------------------------------------------------
def _cluster_object(obj: object, read: Callable[[str, Obj, Obj], _T]) -> _T | DraError:
    """A cluster-scoped object read by ``read(name, metadata, spec)``; a ``DraError`` naming
    the field when it cannot be. Never raises on what the API server sends."""
    name = _name(obj)
    try:
        m = as_map(obj, "object")
        meta = as_map(m.get("metadata"), "metadata")
        name = nonempty_str(meta.get("name"), "metadata.name")
        return read(name, meta, as_map(m.get("spec"), "spec"))
    except (SpecError, QuantityError, TypeError, ValueError) as e:
        return DraError(name, str(e))
    except Exception as e:
        return DraError(name, unreadable(e))


def _device_class(name: str, meta: Obj, spec: Obj) -> DeviceClass:
    extended = spec.get("extendedResourceName")
    return DeviceClass(
        name,
        _selectors(spec.get("selectors"), "spec.selectors"),
        _config(spec.get("config"), "spec.config", None),
        "" if extended is None else nonempty_str(extended, "spec.extendedResourceName"),
        timestamp(meta.get("creationTimestamp")),
    )


def device_class_from(obj: object) -> DeviceClass | DraError:
    """A DeviceClass (cluster-scoped): its name and compiled ``spec.selectors``."""
    return _cluster_object(obj, _device_class)


# ---- ResourceSlice --------------------------------------------------------------------------
def _qualified(name: object, driver: str, field: str) -> str:
    n = nonempty_str(name, field)
    if n.count("/") > 1 or n.startswith("/") or n.endswith("/"):
        raise SpecError(f"{field}: expected <name> or <domain>/<name>, got {as_written(n)}")
    return n if "/" in n else f"{driver}/{n}"


def _attribute(v: object, field: str) -> AttributeValue:
    a = as_map(v, field)
    kinds = [k for k in ("string", "int", "bool", "version") if a.get(k) is not None]
    if len(kinds) != 1:
        raise SpecError(f"{field}: expected exactly one of string, int, bool, version")
    kind = kinds[0]
    value = a[kind]
    if kind == "int":
        return integer(value, f"{field}.int", _INT64_MIN, _INT64_MAX)
    if kind == "bool":
        if not isinstance(value, bool):
            raise SpecError(f"{field}.bool: expected a boolean, got {as_written(value)}")
        return value
    if not isinstance(value, str):
        raise SpecError(f"{field}.{kind}: expected a string, got {as_written(value)}")
    if kind == "version":
        if parse_semver(value) is None:
            raise SpecError(f"{field}.version: not a semantic version: {as_written(value)}")
        return Version(value)
    return value


def _whole(v: object, field: str) -> int:
    q = parse_quantity(v, field)
    if q.denominator != 1:
        raise SpecError(f"{field}: a fraction is not supported yet, got {q}")
    return int(q)


def _capacity(v: object, field: str) -> tuple[int, CapacityPolicy | None]:
    """A capacity's value, and its ``requestPolicy`` (consumable capacity) when set."""
    c = as_map(v, field)
    value = _whole(c.get("value"), f"{field}.value")
    raw = c.get("requestPolicy")
    if raw is None:
        return value, None
    f = f"{field}.requestPolicy"
    p = as_map(raw, f)
    default = None if p.get("default") is None else _whole(p.get("default"), f"{f}.default")
    values = tuple(
        _whole(x, f"{f}.validValues[{i}]")
        for i, x in enumerate(as_list(p.get("validValues"), f"{f}.validValues"))
    )
    if list(values) != sorted(set(values)):
        raise SpecError(f"{f}.validValues: must be in ascending order, each once")
    rng = p.get("validRange")
    if rng is None:
        return value, CapacityPolicy(default, values)
    if values:
        raise SpecError(f"{f}: at most one of validValues and validRange")
    r = as_map(rng, f"{f}.validRange")
    if r.get("min") is None:
        raise SpecError(f"{f}.validRange.min: required")
    low = _whole(r.get("min"), f"{f}.validRange.min")
    high = None if r.get("max") is None else _whole(r.get("max"), f"{f}.validRange.max")
    step = None if r.get("step") is None else _whole(r.get("step"), f"{f}.validRange.step")
    if step is not None and step <= 0:
        raise SpecError(f"{f}.validRange.step: must be positive, got {step}")
    return value, CapacityPolicy(default, (), low, high, step)


_DEVICE_UNSUPPORTED = ("basic",)


def _counters(v: object, field: str) -> tuple[tuple[str, int], ...]:
    """``counters``: name -> ``{value: <quantity>}``, as whole numbers (bytes, units)."""
    out: list[tuple[str, int]] = []
    for k, c in as_map(v, field).items():
        f = f"{field}[{as_written(k)}]"
        if not isinstance(k, str) or not k:
            raise SpecError(f"{f}: expected a counter name")
        q = parse_quantity(as_map(c, f).get("value"), f"{f}.value")
        if q < 0:
            raise SpecError(f"{f}.value: must not be negative, got {q}")
        # a fraction (500m) is counted in thousandths: exact for sums and comparisons
        out.append((k, int(q * 1000)))
    return tuple(out)


def _shared_counters(v: object, field: str) -> tuple[tuple[str, str, int], ...]:
    out: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    for i, raw in enumerate(as_list(v, field)):
        f = f"{field}[{i}]"
        cs = as_map(raw, f)
        name = nonempty_str(cs.get("name"), f"{f}.name")
        if name in seen:
            raise SpecError(f"{f}.name: counter set {as_written(name)} is listed twice")
        seen.add(name)
        out.extend((name, c, n) for c, n in _counters(cs.get("counters"), f"{f}.counters"))
    return tuple(out)


def _consumes(v: object, field: str) -> tuple[tuple[str, str, int], ...]:
    out: list[tuple[str, str, int]] = []
    for i, raw in enumerate(as_list(v, field)):
        f = f"{field}[{i}]"
        c = as_map(raw, f)
        counter_set = nonempty_str(c.get("counterSet"), f"{f}.counterSet")
        out.extend(
            (counter_set, name, n) for name, n in _counters(c.get("counters"), f"{f}.counters")
        )
    return tuple(out)


def _reach(m: Obj, field: str) -> tuple[str, AffinityTerm | None, bool]:
    """Where devices may be used, from exactly one of ``nodeName``, ``nodeSelector`` (one
    term) and ``allNodes``: (node, None, True), ('', term, True) or ('', None, True); (``'',
    None, False``) when none is set."""
    node, selector, all_nodes = m.get("nodeName"), m.get("nodeSelector"), m.get("allNodes")
    given = [
        n
        for n, x in (("nodeName", node), ("nodeSelector", selector), ("allNodes", all_nodes))
        if x not in (None, "", False)
    ]
    if len(given) > 1:
        raise SpecError(f"{field}: only one of {', '.join(given)} may be set")
    if node not in (None, ""):
        return nonempty_str(node, f"{field}.nodeName"), None, True
    if selector is not None:
        terms = as_list(
            as_map(selector, f"{field}.nodeSelector").get("nodeSelectorTerms"),
            f"{field}.nodeSelector.nodeSelectorTerms",
        )
        if len(terms) != 1:
            raise SpecError(
                f"{field}.nodeSelector.nodeSelectorTerms: expected exactly one term, "
                f"got {len(terms)}"
            )
        term = node_selector_term(terms[0], f"{field}.nodeSelector.nodeSelectorTerms[0]")
        return "", term, True
    if all_nodes not in (None, False):
        if all_nodes is not True:
            raise SpecError(f"{field}.allNodes: expected a boolean, got {as_written(all_nodes)}")
        return "", None, True
    return "", None, False


def _device(
    v: object,
    field: str,
    driver: str,
    pool: str,
    reach: tuple[str, AffinityTerm | None] | None,
) -> Device:
    """A device; ``reach`` is the slice's (node, selector term), None when the slice leaves
    it to each device (``perDeviceNodeSelection``)."""
    if v is None:
        raise SpecError(f"{field}: expected an object, got null")
    d = as_map(v, field)
    name = nonempty_str(d.get("name"), f"{field}.name")
    _refuse_set(d, field, _DEVICE_UNSUPPORTED)
    if reach is None:
        node, term, given = _reach(d, field)
        if not given:
            raise SpecError(
                f"{field}: one of nodeName, nodeSelector, allNodes must be set "
                "(spec.perDeviceNodeSelection)"
            )
    else:
        for f in ("nodeName", "nodeSelector", "allNodes"):
            if d.get(f) not in (None, "", False):
                raise SpecError(f"{field}.{f}: only with spec.perDeviceNodeSelection")
        node, term = reach
    attributes: dict[str, AttributeValue] = {}
    for k, a in as_map(d.get("attributes"), f"{field}.attributes").items():
        f = f"{field}.attributes[{as_written(k)}]"
        attributes[_qualified(k, driver, f)] = _attribute(a, f)
    capacity: dict[str, int] = {}
    policies: dict[str, CapacityPolicy] = {}
    written: dict[str, str] = {}
    for k, c in as_map(d.get("capacity"), f"{field}.capacity").items():
        f = f"{field}.capacity[{as_written(k)}]"
        q = _qualified(k, driver, f)
        capacity[q], policy = _capacity(c, f)
        written[str(k)] = q
        if policy is not None:
            policies[q] = policy
    multi = d.get("allowMultipleAllocations")
    if multi is not None and not isinstance(multi, bool):
        raise SpecError(
            f"{field}.allowMultipleAllocations: expected a boolean, got {as_written(multi)}"
        )
    taints = tuple(
        _taint(t, f"{field}.taints[{i}]")
        for i, t in enumerate(as_list(d.get("taints"), f"{field}.taints"))
    )
    conditions = _condition_names(d.get("bindingConditions"), f"{field}.bindingConditions")
    failures = _condition_names(
        d.get("bindingFailureConditions"), f"{field}.bindingFailureConditions"
    )
    if bool(conditions) != bool(failures):
        raise SpecError(
            f"{field}: bindingConditions and bindingFailureConditions must be set together"
        )
    binds = d.get("bindsToNode")
    if binds is not None and not isinstance(binds, bool):
        raise SpecError(f"{field}.bindsToNode: expected a boolean, got {as_written(binds)}")
    return Device(
        DeviceId(driver, pool, name),
        node,
        attributes,
        capacity,
        taints,
        term,
        _consumes(d.get("consumesCounters"), f"{field}.consumesCounters"),
        conditions,
        failures,
        bool(binds),
        bool(multi),
        policies,
        written if any(k != q for k, q in written.items()) else {},
    )


def _condition_names(v: object, field: str) -> tuple[str, ...]:
    """Condition types (at most 4, as the API allows)."""
    names = tuple(nonempty_str(x, f"{field}[{i}]") for i, x in enumerate(as_list(v, field)))
    if len(names) > 4:
        raise SpecError(f"{field}: at most 4, got {len(names)}")
    return names


_EFFECTS = ("NoSchedule", "NoExecute", "None")


def _taint(v: object, field: str) -> DeviceTaint:
    t = as_map(v, field)
    effect = t.get("effect")
    if effect not in _EFFECTS:
        raise SpecError(
            f"{field}.effect: must be one of {', '.join(_EFFECTS)}, got {as_written(effect)}"
        )
    value = t.get("value", "")
    if not isinstance(value, str):
        raise SpecError(f"{field}.value: expected a string, got {as_written(value)}")
    return DeviceTaint(nonempty_str(t.get("key"), f"{field}.key"), value, str(effect))


@dataclass(frozen=True, slots=True)
class TaintRule:
    """A DeviceTaintRule (``resource.k8s.io/v1beta2``): its taint, on every device of the
    driver, pool and device named (an empty one matches any)."""

    name: str
    taint: DeviceTaint
    driver: str = ""
    pool: str = ""
    device: str = ""

    def applies(self, d: DeviceId) -> bool:
        return (
            (not self.driver or self.driver == d.driver)
            and (not self.pool or self.pool == d.pool)
            and (not self.device or self.device == d.name)
        )


def _taint_rule(name: str, meta: Obj, spec: Obj) -> TaintRule:
    sel = as_map(spec.get("deviceSelector"), "spec.deviceSelector")
    driver, pool, device = (
        "" if sel.get(k) is None else nonempty_str(sel.get(k), f"spec.deviceSelector.{k}")
        for k in ("driver", "pool", "device")
    )
    return TaintRule(name, _taint(spec.get("taint"), "spec.taint"), driver, pool, device)


def taint_rule_from(obj: object) -> TaintRule | DraError:
    """A DeviceTaintRule: ``spec.deviceSelector`` (driver, pool, device) and ``spec.taint``."""
    return _cluster_object(obj, _taint_rule)


def _tolerations(v: object, field: str) -> tuple[Toleration, ...]:
    out: list[Toleration] = []
    for i, raw in enumerate(as_list(v, field)):
        f = f"{field}[{i}]"
        t = as_map(raw, f)
        operator = t.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise SpecError(f"{f}.operator: must be Equal or Exists, got {as_written(operator)}")
        effect = t.get("effect") or ""
        if effect and effect not in _EFFECTS:
            raise SpecError(
                f"{f}.effect: must be one of {', '.join(_EFFECTS)}, got {as_written(effect)}"
            )
        key, value = t.get("key") or "", t.get("value") or ""
        if not isinstance(key, str) or not isinstance(value, str):
            raise SpecError(f"{f}: key and value must be strings")
        out.append(Toleration(key, str(operator), value, str(effect)))
    return tuple(out)


def resource_slice_from(obj: object) -> ResourceSlice | DraError:
    """A ResourceSlice: its devices, each with where it may be used (the slice's
    ``nodeName``, ``nodeSelector`` or ``allNodes``, or each device's own with
    ``perDeviceNodeSelection``), or its pool's counter sets (``sharedCounters``)."""
    name = _name(obj)
    try:
        m = as_map(obj, "object")
        meta = as_map(m.get("metadata"), "metadata")
        name = nonempty_str(meta.get("name"), "metadata.name")
        spec = as_map(m.get("spec"), "spec")
        driver = nonempty_str(spec.get("driver"), "spec.driver")
        pool = as_map(spec.get("pool"), "spec.pool")
        pool_name = nonempty_str(pool.get("name"), "spec.pool.name")
        generation = integer(pool.get("generation", 0), "spec.pool.generation", 0, _INT64_MAX)
        count = integer(
            pool.get("resourceSliceCount", 1), "spec.pool.resourceSliceCount", 1, _INT64_MAX
        )
        counters = _shared_counters(spec.get("sharedCounters"), "spec.sharedCounters")
        node, term, given = _reach(spec, "spec")
        per_device = spec.get("perDeviceNodeSelection")
        if per_device not in (None, False):
            if per_device is not True:
                raise SpecError(
                    f"spec.perDeviceNodeSelection: expected a boolean, got {as_written(per_device)}"
                )
            if given:
                raise SpecError(
                    "spec: only one of nodeName, nodeSelector, allNodes, "
                    "perDeviceNodeSelection may be set"
                )
        elif not given and not counters:
            raise SpecError(
                "spec: one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must be set"
            )
        raw_devices = as_list(spec.get("devices"), "spec.devices")
        if counters and raw_devices:
            raise SpecError("spec: only one of devices and sharedCounters may be set")
        devices = tuple(
            _device(
                d,
                f"spec.devices[{i}]",
                driver,
                pool_name,
                None if per_device is True else (node, term),
            )
            for i, d in enumerate(raw_devices)
        )
        names = [d.id.name for d in devices]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError(f"spec.devices: device {as_written(dup)} is listed twice")
        return ResourceSlice(name, driver, pool_name, generation, count, node, devices, counters)
    except (SpecError, QuantityError, TypeError, ValueError) as e:
        return DraError(name, str(e))
    except Exception as e:
        return DraError(name, unreadable(e))


# ---- ResourceClaim --------------------------------------------------------------------------
def _capacity_requests(v: object, field: str) -> tuple[tuple[str, int], ...]:
    """``capacity.requests``: capacity name (as the slice writes it) -> amount."""
    if v is None:
        return ()
    reqs = as_map(as_map(v, field).get("requests"), f"{field}.requests")
    return tuple(
        (nonempty_str(k, f"{field}.requests"), _whole(q, f"{field}.requests[{as_written(k)}]"))
        for k, q in sorted(reqs.items())
    )


def _exact(r: Obj, field: str, *, admin: bool) -> ExactRequest:
    device_class = nonempty_str(r.get("deviceClassName"), f"{field}.deviceClassName")
    selectors = _selectors(r.get("selectors"), f"{field}.selectors")
    mode = r.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise SpecError(
            f"{field}.allocationMode: must be ExactCount or All, got {as_written(mode)}"
        )
    if mode == "All":
        if r.get("count") is not None:
            raise SpecError(f"{field}.count: must not be set with allocationMode All")
        count = 0
    else:
        count = integer(r.get("count", 1), f"{field}.count", 1, MAX_COUNT)
    admin_access = False
    if admin:
        a = r.get("adminAccess")
        if a is not None and not isinstance(a, bool):
            raise SpecError(f"{field}.adminAccess: expected a boolean, got {as_written(a)}")
        admin_access = bool(a)
    elif r.get("adminAccess") is not None:
        raise SpecError(f"{field}.adminAccess: not allowed in a sub-request")
    return ExactRequest(
        device_class,
        selectors,
        AllocationMode(mode),
        count if count else 1,
        admin_access,
        _tolerations(r.get("tolerations"), f"{field}.tolerations"),
        _capacity_requests(r.get("capacity"), f"{field}.capacity"),
    )


def _request(v: object, field: str) -> DeviceRequest:
    if v is None:
        raise SpecError(f"{field}: expected an object, got null")
    r = as_map(v, field)
    name = nonempty_str(r.get("name"), f"{field}.name")
    exactly, first = r.get("exactly"), r.get("firstAvailable")
    if (exactly is None) == (first is None):
        raise SpecError(f"{field}: expected exactly one of exactly, firstAvailable")
    if exactly is not None:
        return DeviceRequest(
            name,
            exactly=_exact(as_map(exactly, f"{field}.exactly"), f"{field}.exactly", admin=True),
        )
    subs: list[tuple[str, ExactRequest]] = []
    for i, s in enumerate(as_list(first, f"{field}.firstAvailable")):
        f = f"{field}.firstAvailable[{i}]"
        if s is None:
            raise SpecError(f"{f}: expected an object, got null")
        sub = as_map(s, f)
        sub_name = nonempty_str(sub.get("name"), f"{f}.name")
        if any(n == sub_name for n, _ in subs):
            raise SpecError(f"{f}.name: {as_written(sub_name)} is used twice")
        subs.append((sub_name, _exact(sub, f, admin=False)))
    if not subs:
        raise SpecError(f"{field}.firstAvailable: expected at least one sub-request")
    return DeviceRequest(name, first_available=tuple(subs))


def _constraint(v: object, field: str, requests: set[str]) -> MatchAttribute:
    if v is None:
        raise SpecError(f"{field}: expected an object, got null")
    c = as_map(v, field)
    match, distinct = c.get("matchAttribute"), c.get("distinctAttribute")
    if (match is None) == (distinct is None):
        raise SpecError(f"{field}: expected exactly one of matchAttribute, distinctAttribute")
    kind = "matchAttribute" if match is not None else "distinctAttribute"
    attribute = nonempty_str(c.get(kind), f"{field}.{kind}")
    if attribute.count("/") != 1 or attribute.startswith("/") or attribute.endswith("/"):
        raise SpecError(f"{field}.{kind}: expected <domain>/<name>, got {as_written(attribute)}")
    return MatchAttribute(attribute, _request_names(c, field, requests), distinct is not None)


def _node_of(selector: object, field: str) -> tuple[str, AffinityTerm | None]:
    """The one node an allocation's ``nodeSelector`` names (``matchFields`` on
    ``metadata.name``, as kube-scheduler writes it, or a hostname label): (node, None); else
    ('', the one term the selector has)."""
    terms = as_list(as_map(selector, field).get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")
    if len(terms) == 1:
        t = as_map(terms[0], f"{field}.nodeSelectorTerms[0]")
        fields = as_list(t.get("matchFields"), "matchFields")
        exprs = as_list(t.get("matchExpressions"), "matchExpressions")
        reqs = [(r, "metadata.name") for r in fields] + [
            (r, "kubernetes.io/hostname") for r in exprs
        ]
        if len(reqs) == 1:
            r, key = reqs[0]
            req = as_map(r, f"{field}.nodeSelectorTerms[0]")
            values = as_list(req.get("values"), "values")
            if (
                req.get("key") == key
                and req.get("operator") == "In"
                and len(values) == 1
                and isinstance(values[0], str)
                and values[0]
            ):
                return values[0], None
        return "", node_selector_term(terms[0], f"{field}.nodeSelectorTerms[0]")
    raise _unsupported(f"{field}.nodeSelectorTerms: {len(terms)} terms")


def _allocation(v: object, field: str) -> ClaimAllocation:
    a = as_map(v, field)
    node, reach = "", None
    if a.get("nodeSelector") is not None:  # none: the devices reach every node
        node, reach = _node_of(a.get("nodeSelector"), f"{field}.nodeSelector")
    devices = as_map(a.get("devices"), f"{field}.devices")
    results: list[tuple[str, DeviceId]] = []
    conditions: list[tuple[DeviceId, tuple[str, ...], tuple[str, ...]]] = []
    shares: list[tuple[int, tuple[tuple[str, int], ...]]] = []
    for i, r in enumerate(as_list(devices.get("results"), f"{field}.devices.results")):
        f = f"{field}.devices.results[{i}]"
        if r is None:
            raise SpecError(f"{f}: expected an object, got null")
        res = as_map(r, f)
        device = DeviceId(
            nonempty_str(res.get("driver"), f"{f}.driver"),
            nonempty_str(res.get("pool"), f"{f}.pool"),
            nonempty_str(res.get("device"), f"{f}.device"),
        )
        results.append((nonempty_str(res.get("request"), f"{f}.request"), device))
        if res.get("shareID") is not None:  # a share of a device allocatable many times
            nonempty_str(res.get("shareID"), f"{f}.shareID")
            consumed = as_map(res.get("consumedCapacity"), f"{f}.consumedCapacity")
            shares.append(
                (
                    i,
                    tuple(
                        (str(k), _whole(q, f"{f}.consumedCapacity[{as_written(k)}]"))
                        for k, q in sorted(consumed.items())
                    ),
                )
            )
        waits = _condition_names(res.get("bindingConditions"), f"{f}.bindingConditions")
        if waits:
            failures = _condition_names(
                res.get("bindingFailureConditions"), f"{f}.bindingFailureConditions"
            )
            conditions.append((device, waits, failures))
    return ClaimAllocation(node, tuple(results), reach, tuple(conditions), tuple(shares))


def _reserved_for(v: object, field: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, r in enumerate(as_list(v, field)):
        f = f"{field}[{i}]"
        out.append(nonempty_str(as_map(r, f).get("uid"), f"{f}.uid"))
    return tuple(out)


EXTENDED_CLAIM = "resource.kubernetes.io/extended-resource-claim"


def _made_for(meta: Obj) -> str:
    """The uid of the pod whose extended resources the claim serves: annotated
    ``resource.kubernetes.io/extended-resource-claim: "true"`` and controlled by the pod (as
    kube-scheduler finds such a claim); '' otherwise."""
    annotations = meta.get("annotations")
    if not isinstance(annotations, dict) or annotations.get(EXTENDED_CLAIM) != "true":
        return ""
    for ref in as_list(meta.get("ownerReferences"), "metadata.ownerReferences"):
        if (
            isinstance(ref, dict)
            and ref.get("kind") == "Pod"
            and ref.get("controller") is True
            and isinstance(ref.get("uid"), str)
        ):
            return str(ref["uid"])
    return ""


def resource_claim_from(obj: object) -> Claim | DraError:
    """A ResourceClaim: its requests and constraints, its allocation when one was written (on
    one node), and the uids it is reserved for."""
    ns, name, _, _ = identity(obj)
    key = f"{ns}/{name}"
    try:
        m = as_map(obj, "object")
        meta = as_map(m.get("metadata"), "metadata")
        name = nonempty_str(meta.get("name"), "metadata.name")
        uid = meta.get("uid")
        uid = uid if isinstance(uid, str) and uid else key
        spec = as_map(m.get("spec"), "spec")
        devices = as_map(spec.get("devices"), "spec.devices")
        requests = tuple(
            _request(r, f"spec.devices.requests[{i}]")
            for i, r in enumerate(as_list(devices.get("requests"), "spec.devices.requests"))
        )
        names = [r.name for r in requests]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise SpecError(f"spec.devices.requests: {as_written(dup)} is used twice")
        constraints = tuple(
            _constraint(c, f"spec.devices.constraints[{i}]", set(names))
            for i, c in enumerate(as_list(devices.get("constraints"), "spec.devices.constraints"))
        )
        status = as_map(m.get("status"), "status")
        made_for = _made_for(meta)
        alloc = status.get("allocation")
        allocation = None if alloc is None else _allocation(alloc, "status.allocation")
        return Claim(
            ns,
            name,
            uid,
            requests,
            constraints,
            allocation,
            _reserved_for(status.get("reservedFor"), "status.reservedFor"),
            deleting=bool(meta.get("deletionTimestamp")),
            config=_config(devices.get("config"), "spec.devices.config", set(names)),
            made_for=made_for,
        )
    except (SpecError, QuantityError, TypeError, ValueError) as e:
        return DraError(key, str(e))
    except Exception as e:
        return DraError(key, unreadable(e))


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The resource claims a pod uses (``namespace/name`` keys, in ``spec.resourceClaims``
    order, each once), and, while a claim made from a template has no name yet in
    ``status.resourceClaimStatuses`` (kube-controller-manager's resourceclaim controller
    creates it), why the pod must wait."""

    keys: tuple[str, ...] = ()
    waiting: str = ""


def pod_claims(spec: Obj, status: Obj, namespace: str) -> PodClaims:
    """``spec.resourceClaims`` of a pod: each entry names a ResourceClaim
    (``resourceClaimName``) or a ResourceClaimTemplate (``resourceClaimTemplateName``), whose
    claim is the one ``status.resourceClaimStatuses`` names for the entry. An entry the status
    lists without a claim name needs no claim (as the API documents). Raises SpecError naming
    the field."""
    field = "spec.resourceClaims"
    made: dict[str, str | None] = {}
    for i, s in enumerate(
        as_list(status.get("resourceClaimStatuses"), "status.resourceClaimStatuses")
    ):
        f = f"status.resourceClaimStatuses[{i}]"
        s = as_map(s, f)
        entry = nonempty_str(s.get("name"), f"{f}.name")
        claim = s.get("resourceClaimName")
        made[entry] = nonempty_str(claim, f"{f}.resourceClaimName") if claim is not None else None
    keys: list[str] = []
    waiting: list[str] = []
    seen: set[str] = set()
    for i, e in enumerate(as_list(spec.get("resourceClaims"), field)):
        f = f"{field}[{i}]"
        e = as_map(e, f)
        entry = nonempty_str(e.get("name"), f"{f}.name")
        if entry in seen:
            raise SpecError(f"{f}.name: {as_written(entry)} is used twice")
        seen.add(entry)
        by_name, template = e.get("resourceClaimName"), e.get("resourceClaimTemplateName")
        if (by_name is None) == (template is None):
            raise SpecError(
                f"{f}: exactly one of resourceClaimName and resourceClaimTemplateName must be set"
            )
        if by_name is not None:
            name = nonempty_str(by_name, f"{f}.resourceClaimName")
        else:
            tname = nonempty_str(template, f"{f}.resourceClaimTemplateName")
            if entry not in made:
                waiting.append(
                    f"{f} ({entry}): waiting for the ResourceClaim made from template {tname} "
                    "(status.resourceClaimStatuses names none yet)"
                )
                continue
            made_name = made[entry]
            if made_name is None:
                continue  # no claim needed
            name = made_name
        key = f"{namespace}/{name}"
        if key not in keys:
            keys.append(key)
    return PodClaims(tuple(keys), "; ".join(waiting))
