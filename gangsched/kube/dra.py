"""Dynamic Resource Allocation objects for the core: DeviceClasses, ResourceSlices and
ResourceClaims (``resource.k8s.io/v1``) watched, read by ``gangsched.api.dra`` and fed to the
core; the claims are also kept as last seen, for the binder's writes (kube/write/claims.py).

- **ResourceSlices.** A driver publishes a pool in one or more slices and replaces it by
  publishing slices of a higher ``spec.pool.generation``; as kube-scheduler does, only the
  slices of a pool's newest generation count, so devices of a pool being replaced are never
  counted twice. A slice that cannot be read (or sets a field the core does not model) adds
  no devices, and is logged with the field.
- **DeviceClasses.** One that cannot be read is known to the core as refused: claims of it
  wait, naming the class and the field.
- **ResourceClaims.** One that cannot be read is known to the core as refused: its pods wait,
  naming the claim and the field; an allocation it had still holds its devices.

- **DeviceTaintRules** (``resource.k8s.io/v1beta2``, served when the API server runs with the
  ``DRADeviceTaintRules`` gate and that API version on): each rule's taint is added to the
  devices its selector names (driver, pool, device) before the core sees them, as
  kube-scheduler adds them; a rule that changes re-publishes the devices.

If the server does not serve ``resource.k8s.io/v1`` (before Kubernetes 1.34), the reflectors
report the resources absent and look for them again every minute; pods with claims wait. Not
serving DeviceTaintRules (the default) only means there are none.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

import structlog

from gangsched.api.dra import (
    DraError,
    ResourceSlice,
    TaintRule,
    device_class_from,
    resource_claim_from,
    resource_slice_from,
    taint_rule_from,
)
from gangsched.core.resourceclaims import Device
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON
from gangsched.kube.io.keyed import keyed_handler
from gangsched.kube.io.reflector import Reflector
from gangsched.kube.io.slicing import SLICE_SECONDS

__all__ = ["API", "DraWatch"]

log = structlog.get_logger("gangsched.dra")

API = "/apis/resource.k8s.io/v1"
TAINT_RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"


def _name(obj: JSON) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def _key(obj: JSON) -> str:
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return f"{ns if isinstance(ns, str) else ''}/{_name(obj)}"


@dataclass(frozen=True, slots=True)
class _Slice:
    pool: tuple[str, str]  # (driver, pool); ("", name) when unreadable
    generation: int
    read: ResourceSlice | DraError


class DraWatch:
    """The watches of DRA objects and what they last said. ``claims``: every ResourceClaim as
    last seen (``namespace/name`` -> the object), which the binder writes against."""

    def __init__(self, core: Scheduler) -> None:
        self._core = core
        self.claims: dict[str, JSON] = {}
        self._slices: dict[str, _Slice] = {}
        self._pools: dict[tuple[str, str], set[str]] = {}
        self._in_core: set[str] = set()  # slices whose devices the core counts
        self.refused: dict[str, str] = {}  # kind/key -> why, as last logged
        self._rules: dict[str, TaintRule] = {}  # DeviceTaintRules by name

    # ---- device taint rules ---------------------------------------------------------------
    def _rule_upsert(self, obj: JSON) -> None:
        read = taint_rule_from(obj)
        if isinstance(read, DraError):
            self._refuse("DeviceTaintRule", read)
            return
        self.refused.pop(f"DeviceTaintRule/{read.name}", None)
        if self._rules.get(read.name) != read:
            self._rules[read.name] = read
            self._resettle()

    def _rule_delete(self, name: str) -> None:
        self.refused.pop(f"DeviceTaintRule/{name}", None)
        if self._rules.pop(name, None) is not None:
            self._resettle()

    def _resettle(self) -> None:
        for pool in list(self._pools):
            self._settle(pool)

    def _tainted(self, devices: tuple[Device, ...]) -> tuple[Device, ...]:
        """The devices with the taints of the rules that name them."""
        if not self._rules:
            return devices
        rules = sorted(self._rules.values(), key=lambda r: r.name)
        out = []
        for d in devices:
            extra = tuple(r.taint for r in rules if r.applies(d.id) and r.taint not in d.taints)
            out.append(replace(d, taints=d.taints + extra) if extra else d)
        return tuple(out)

    # ---- device classes -------------------------------------------------------------------
    def _class_upsert(self, obj: JSON) -> None:
        read = device_class_from(obj)
        if isinstance(read, DraError):
            self._refuse("DeviceClass", read)
            self._core.device_class_refused(read.key, read.reason)
            return
        self.refused.pop(f"DeviceClass/{read.name}", None)
        self._core.device_class_upsert(read)

    def _class_delete(self, name: str) -> None:
        self.refused.pop(f"DeviceClass/{name}", None)
        self._core.device_class_delete(name)

    # ---- claims ---------------------------------------------------------------------------
    def _claim_upsert(self, obj: JSON) -> None:
        key = _key(obj)
        self.claims[key] = obj
        read = resource_claim_from(obj)
        if isinstance(read, DraError):
            self._refuse("ResourceClaim", read)
            self._core.resource_claim_refused(key, read.reason)
            return
        self.refused.pop(f"ResourceClaim/{key}", None)
        self._core.resource_claim_upsert(read)

    def _claim_delete(self, key: str) -> None:
        self.claims.pop(key, None)
        self.refused.pop(f"ResourceClaim/{key}", None)
        self._core.resource_claim_delete(key)

    # ---- slices ---------------------------------------------------------------------------
    def _slice_upsert(self, obj: JSON) -> None:
        name = _name(obj)
        read = resource_slice_from(obj)
        if isinstance(read, DraError):
            self._refuse("ResourceSlice", read)
            new = _Slice(("", name), 0, read)
        else:
            self.refused.pop(f"ResourceSlice/{name}", None)
            new = _Slice((read.driver, read.pool), read.generation, read)
        old = self._slices.get(name)
        self._slices[name] = new
        if old is not None and old.pool != new.pool:
            self._pools.get(old.pool, set()).discard(name)
            self._settle(old.pool)
        self._pools.setdefault(new.pool, set()).add(name)
        self._settle(new.pool)

    def _slice_delete(self, name: str) -> None:
        self.refused.pop(f"ResourceSlice/{name}", None)
        old = self._slices.pop(name, None)
        if name in self._in_core:
            self._core.resource_slice_delete(name)
            self._in_core.discard(name)
        if old is None:
            return
        self._pools.get(old.pool, set()).discard(name)
        self._settle(old.pool)

    def _settle(self, pool: tuple[str, str]) -> None:
        """The core counts the readable slices of the pool's newest generation, no other."""
        names = self._pools.get(pool, set())
        if not names:
            self._pools.pop(pool, None)
        newest = max((self._slices[n].generation for n in names), default=0)
        for n in sorted(names):
            s = self._slices[n]
            if s.generation == newest and isinstance(s.read, ResourceSlice):
                r = s.read
                self._core.resource_slice_upsert(n, self._tainted(r.devices), r.pool_counters)
                self._in_core.add(n)
            elif n in self._in_core:
                self._core.resource_slice_delete(n)
                self._in_core.discard(n)

    def _refuse(self, kind: str, error: DraError) -> None:
        at = f"{kind}/{error.key}"
        if self.refused.get(at) != error.reason:
            log.warning("cannot use a DRA object", kind=kind, name=error.key, error=error.reason)
        self.refused[at] = error.reason

    # ---- watches --------------------------------------------------------------------------
    def reflectors(
        self,
        client: KubeApi,
        poke: Callable[[], None],
        *,
        slice_seconds: float = SLICE_SECONDS,
        on_yield: Callable[[], None] | None = None,
    ) -> list[Reflector]:
        handler = functools.partial(
            keyed_handler, poke=poke, budget=slice_seconds, on_yield=on_yield
        )
        return [
            Reflector(
                client,
                f"{API}/deviceclasses",
                handler(_name, self._class_upsert, self._class_delete),
                name="deviceclasses",
            ),
            Reflector(
                client,
                f"{API}/resourceslices",
                handler(_name, self._slice_upsert, self._slice_delete),
                name="resourceslices",
            ),
            Reflector(
                client,
                f"{API}/resourceclaims",
                handler(_key, self._claim_upsert, self._claim_delete),
                name="resourceclaims",
            ),
            Reflector(
                client,
                TAINT_RULES,
                handler(_name, self._rule_upsert, self._rule_delete),
                name="devicetaintrules",
            ),
        ]
