"""Generated single-pod resource-claim cases for the DRA differential test, rendered as API
objects for one scheduler's copy, and an independent checker of the allocations a scheduler
wrote. Written only for the tests: the checker evaluates the structured selectors the cases are
made of (never the CEL they are rendered to), and shares no code with gangsched.

A case: one or two nodes, each with 2 to 5 devices (attributes ``model`` string, ``numa`` and
``index`` integers, capacity ``memory``; some with a ``NoSchedule`` or ``None`` taint); a
DeviceClass for the copy's driver (sometimes with a selector of its own); devices already held
by another claim; sometimes a claim already allocated on the first node for another consumer
that the pod shares; and the pod's own claims: requests ``exactly`` (selectors, ``ExactCount``
1 to 3 or ``All``, sometimes a toleration of the taint) or ``firstAvailable`` (two
alternatives), sometimes with a ``matchAttribute`` constraint on ``numa``.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

RESOURCE = "resource.k8s.io/v1"
MODELS = ("a100", "h100")
GI = 1024**3


@dataclass(frozen=True)
class Sel:
    """``attribute op value``; ``memory`` compares the capacity (in Gi)."""

    attribute: str
    op: str
    value: str | int

    def holds(self, device: dict[str, Any]) -> bool:
        have = device[self.attribute]
        want = self.value
        return {
            "==": have == want,
            "!=": have != want,
            ">=": have >= want,  # type: ignore[operator]
            "<": have < want,  # type: ignore[operator]
        }[self.op]

    def cel(self, driver: str) -> str:
        if self.attribute == "memory":
            cmp = {"==": "== 0", "!=": "!= 0", ">=": ">= 0", "<": "< 0"}[self.op]
            return f'device.capacity["{driver}"].memory.compareTo(quantity("{self.value}Gi")) {cmp}'
        value = f'"{self.value}"' if isinstance(self.value, str) else str(self.value)
        return f'device.attributes["{driver}"].{self.attribute} {self.op} {value}'


@dataclass(frozen=True)
class Want:
    """One kind of device: selectors, ``count`` of them (0: ``All``)."""

    sels: tuple[Sel, ...]
    count: int
    tolerate: bool = False  # tolerates the taint "maint" (operator Exists)

    def matches(self, device: dict[str, Any], class_sels: tuple[Sel, ...]) -> bool:
        return all(s.holds(device) for s in (*class_sels, *self.sels))

    def may_take(self, device: dict[str, Any]) -> bool:
        """A NoSchedule taint is tolerated (a None taint never matters)."""
        return device["taint"] != "NoSchedule" or self.tolerate


@dataclass(frozen=True)
class Request:
    name: str
    exactly: Want | None = None
    first_available: tuple[tuple[str, Want], ...] = ()


@dataclass(frozen=True)
class ClaimCase:
    name: str
    requests: tuple[Request, ...]
    match_numa: bool = False


@dataclass
class Case:
    id: int
    nodes: list[list[dict[str, Any]]]  # per node, its devices' attributes
    class_sels: tuple[Sel, ...]
    held: list[tuple[int, int]]  # (node, device) held by another claim
    shared: list[int]  # devices of node 0 of a claim allocated already, used by the pod
    claims: list[ClaimCase] = field(default_factory=list)
    # per node: 0, or (a partitionable pool, DRAPartitionableDevices, on in v1.36) the GiB of
    # memory its counter set has, which every device consumes its own memory from
    counters: list[int] = field(default_factory=list)


def _sel(rng: random.Random) -> Sel:
    kind = rng.choice(("model", "numa", "index", "memory"))
    if kind == "model":
        return Sel("model", rng.choice(("==", "!=")), rng.choice(MODELS))
    if kind == "numa":
        return Sel("numa", "==", rng.randrange(2))
    if kind == "index":
        return Sel("index", rng.choice((">=", "<")), rng.randrange(1, 4))
    return Sel("memory", rng.choice((">=", "<")), rng.choice((40, 60, 80)))


def _want(rng: random.Random) -> Want:
    sels = tuple(_sel(rng) for _ in range(rng.choice((0, 0, 1, 1, 2))))
    count = 0 if rng.random() < 0.15 else rng.choice((1, 1, 1, 2, 2, 3))
    return Want(sels, count, rng.random() < 0.3)


def make_case(rng: random.Random, i: int) -> Case:
    nodes = []
    for _ in range(rng.choice((1, 1, 2))):
        n = rng.randrange(2, 6)
        nodes.append(
            [
                {
                    "model": rng.choice(MODELS),
                    "numa": d * 2 // n,
                    "index": d,
                    "memory": rng.choice((40, 80)),
                    # device taints (DRADeviceTaints, on in v1.36): key "maint"
                    "taint": rng.choice(("", "", "", "", "", "", "NoSchedule", "None")),
                }
                for d in range(n)
            ]
        )
    class_sels = (Sel("model", "==", "h100"),) if rng.random() < 0.2 else ()
    held = [
        (ni, d) for ni, devs in enumerate(nodes) for d in range(len(devs)) if rng.random() < 0.2
    ]
    free0 = [d for d in range(len(nodes[0])) if (0, d) not in held]
    shared = [rng.choice(free0)] if free0 and rng.random() < 0.2 else []
    claims = []
    for c in range(rng.choice((1, 1, 2))):
        requests = []
        for r in range(rng.choice((1, 1, 2))):
            if rng.random() < 0.25:
                alts = tuple((f"s{k}", _want(rng)) for k in range(2))
                requests.append(Request(f"r{r}", first_available=alts))
            else:
                requests.append(Request(f"r{r}", exactly=_want(rng)))
        claims.append(ClaimCase(f"c{c}", tuple(requests), match_numa=rng.random() < 0.3))
    # drawn from their own stream: the cases above stay what they were
    extra = random.Random(i * 7919 + 13)
    counters = [extra.choice((0, 0, 80, 120, 160)) for _ in nodes]
    return Case(i, nodes, class_sels, held, shared, claims, counters)


# ---- rendering -------------------------------------------------------------------------------
def _want_json(want: Want, cls: str, driver: str) -> dict[str, Any]:
    out: dict[str, Any] = {"deviceClassName": cls}
    if want.sels:
        out["selectors"] = [{"cel": {"expression": s.cel(driver)}} for s in want.sels]
    if want.tolerate:
        out["tolerations"] = [{"key": "maint", "operator": "Exists"}]
    if want.count:
        out["allocationMode"] = "ExactCount"
        out["count"] = want.count
    else:
        out["allocationMode"] = "All"
    return out


@dataclass
class Copy:
    """One scheduler's copy of a case: its driver (also the class), nodes and names."""

    case: Case
    tag: str  # "k" or "g"
    ns: str
    label: str

    @property
    def driver(self) -> str:
        return f"{self.tag}{self.case.id}-{self.label}.example.com"

    def node(self, i: int) -> str:
        return f"{self.label}-{self.tag}{self.case.id}-n{i}"

    def claim(self, name: str) -> str:
        return f"{self.tag}{self.case.id}-{name}"

    @property
    def pod(self) -> str:
        return f"{self.tag}{self.case.id}-pod"

    def device_class(self) -> dict[str, Any]:
        sels = [
            {"cel": {"expression": f'device.driver == "{self.driver}"'}},
            *({"cel": {"expression": s.cel(self.driver)}} for s in self.case.class_sels),
        ]
        return {
            "apiVersion": RESOURCE,
            "kind": "DeviceClass",
            "metadata": {"name": self.driver},
            "spec": {"selectors": sels},
        }

    def slices(self) -> list[dict[str, Any]]:
        out = []
        for i, devs in enumerate(self.case.nodes):
            total = self.case.counters[i] if self.case.counters else 0
            pool = {"name": self.node(i), "generation": 1, "resourceSliceCount": 2 if total else 1}
            if total:
                out.append(
                    {
                        "apiVersion": RESOURCE,
                        "kind": "ResourceSlice",
                        "metadata": {"name": f"{self.node(i)}-{self.driver}-counters"},
                        "spec": {
                            "driver": self.driver,
                            "nodeName": self.node(i),
                            "pool": pool,
                            "sharedCounters": [
                                {"name": "mem", "counters": {"memory": {"value": f"{total}Gi"}}}
                            ],
                        },
                    }
                )
            out.append(
                {
                    "apiVersion": RESOURCE,
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{self.node(i)}-{self.driver}"},
                    "spec": {
                        "driver": self.driver,
                        "nodeName": self.node(i),
                        "pool": pool,
                        "devices": [
                            {
                                "name": f"d{d['index']}",
                                "attributes": {
                                    "model": {"string": d["model"]},
                                    "numa": {"int": d["numa"]},
                                    "index": {"int": d["index"]},
                                },
                                "capacity": {"memory": {"value": f"{d['memory']}Gi"}},
                                **(
                                    {"taints": [{"key": "maint", "effect": d["taint"]}]}
                                    if d["taint"]
                                    else {}
                                ),
                                **(
                                    {
                                        "consumesCounters": [
                                            {
                                                "counterSet": "mem",
                                                "counters": {
                                                    "memory": {"value": f"{d['memory']}Gi"}
                                                },
                                            }
                                        ]
                                    }
                                    if total
                                    else {}
                                ),
                            }
                            for d in devs
                        ],
                    },
                }
            )
        return out

    def _claim_json(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": RESOURCE,
            "kind": "ResourceClaim",
            "metadata": {"name": self.claim(name), "namespace": self.ns},
            "spec": {"devices": spec},
        }

    def claims(self) -> list[dict[str, Any]]:
        out = []
        for c in self.case.claims:
            requests = []
            for r in c.requests:
                if r.exactly is not None:
                    requests.append(
                        {"name": r.name, "exactly": _want_json(r.exactly, self.driver, self.driver)}
                    )
                else:
                    requests.append(
                        {
                            "name": r.name,
                            "firstAvailable": [
                                {"name": sub, **_want_json(w, self.driver, self.driver)}
                                for sub, w in r.first_available
                            ],
                        }
                    )
            spec: dict[str, Any] = {"requests": requests}
            if c.match_numa:
                spec["constraints"] = [{"matchAttribute": f"{self.driver}/numa"}]
            out.append(self._claim_json(c.name, spec))
        one = {"requests": [{"name": "r", "exactly": {"deviceClassName": self.driver}}]}
        for ni, d in self.case.held:
            out.append(self._claim_json(f"held-{ni}-{d}", one))
        if self.case.shared:
            out.append(self._claim_json("shared", one))
        return out

    def allocations(self) -> list[tuple[str, dict[str, Any]]]:
        """(claim, status) of the claims allocated before the pod comes."""

        def status(node: int, d: int, consumer: str) -> dict[str, Any]:
            return {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "r",
                                "driver": self.driver,
                                "pool": self.node(node),
                                "device": f"d{d}",
                            }
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [self.node(node)],
                                    }
                                ]
                            }
                        ]
                    },
                    # as kube-scheduler v1.36 writes it, and needs it to add a consumer
                    "allocationTimestamp": "2026-01-01T00:00:00Z",
                },
                "reservedFor": [{"resource": "pods", "name": consumer, "uid": f"{consumer}-uid"}],
            }

        out = [(self.claim(f"held-{n}-{d}"), status(n, d, "other")) for n, d in self.case.held]
        for d in self.case.shared:
            out.append((self.claim("shared"), status(0, d, "partner")))
        return out

    def pod_claims(self) -> list[dict[str, str]]:
        names = [c.name for c in self.case.claims] + (["shared"] if self.case.shared else [])
        return [{"name": n, "resourceClaimName": self.claim(n)} for n in names]


# ---- the checker -----------------------------------------------------------------------------
def check(copy: Copy, node: str, claims: dict[str, dict[str, Any]]) -> list[str]:
    """What is wrong with the allocations the pod (bound on ``node``) runs with; [] if nothing.
    ``claims``: every claim of the copy, by name, as the API server has them."""
    case = copy.case
    problems: list[str] = []
    if not node.startswith(f"{copy.label}-{copy.tag}{case.id}-n"):
        return [f"bound on {node}, not one of the case's nodes"]
    ni = int(node.rsplit("-n", 1)[1])
    devices = {f"d{d['index']}": d for d in case.nodes[ni]}
    taken: Counter[tuple[str, str]] = Counter()
    for c in claims.values():
        alloc = (c.get("status") or {}).get("allocation")
        for r in (alloc or {}).get("devices", {}).get("results", []):
            taken[(r["pool"], r["device"])] += 1
    twice = [d for d, n in taken.items() if n > 1]
    if twice:
        problems.append(f"devices allocated twice: {twice}")
    for c in case.claims:
        obj = claims.get(copy.claim(c.name))
        alloc = ((obj or {}).get("status") or {}).get("allocation")
        if not alloc:
            problems.append(f"claim {c.name} not allocated")
            continue
        terms = alloc.get("nodeSelector", {}).get("nodeSelectorTerms", [])
        nodes = [v for t in terms for f in t.get("matchFields", []) for v in f.get("values", [])]
        if nodes != [node]:
            problems.append(f"claim {c.name} allocated for {nodes}, pod on {node}")
        results = alloc.get("devices", {}).get("results", [])
        chosen: list[dict[str, Any]] = []
        for r in results:
            if r["driver"] != copy.driver or r["pool"] != node or r["device"] not in devices:
                problems.append(f"claim {c.name}: {r} is not a device of {node}")
        for req in c.requests:
            mine = [r for r in results if r["request"].split("/")[0] == req.name]
            if req.exactly is not None:
                options = {req.name: req.exactly}
            else:
                options = {f"{req.name}/{sub}": w for sub, w in req.first_available}
            used = {r["request"] for r in mine}
            if len(used) != 1 or next(iter(used)) not in options:
                problems.append(f"claim {c.name} request {req.name}: results for {sorted(used)}")
                continue
            want = options[next(iter(used))]
            got = [devices[r["device"]] for r in mine if r["device"] in devices]
            chosen += got
            for d in got:
                if not want.matches(d, case.class_sels):
                    problems.append(f"claim {c.name}: d{d['index']} does not match {want}")
                if not want.may_take(d):
                    problems.append(f"claim {c.name}: d{d['index']}'s taint is not tolerated")
            if want.count and len(got) != want.count:
                problems.append(f"claim {c.name}: {len(got)} devices for count {want.count}")
            if not want.count:
                every = {x["index"] for x in case.nodes[ni] if want.matches(x, case.class_sels)}
                if {d["index"] for d in got} != every:
                    problems.append(f"claim {c.name}: All got {got}, matching {every}")
        if c.match_numa and len({d["numa"] for d in chosen}) > 1:
            problems.append(f"claim {c.name}: numa differs across {chosen}")
    if case.shared and ni != 0:
        problems.append("the pod shares a claim allocated on node 0 but runs elsewhere")
    total = case.counters[ni] if case.counters else 0
    if total:
        # every device allocated from the node's pool consumes its memory from the counter set
        mine = {copy.claim(c.name) for c in case.claims}
        held = used = 0
        for name, c in claims.items():
            alloc = (c.get("status") or {}).get("allocation")
            for r in (alloc or {}).get("devices", {}).get("results", []):
                if r["pool"] == node and r["device"] in devices:
                    memory = int(devices[r["device"]]["memory"])
                    if name in mine:
                        used += memory
                    else:
                        held += memory
        if used and held + used > total:
            problems.append(f"counters: {held} GiB held + {used} GiB chosen > {total} GiB")
    return problems
