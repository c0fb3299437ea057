"""Dynamic Resource Allocation end to end on the real control plane.

A fake DRA driver is the test itself: it publishes a ResourceSlice of GPUs for each of its KWOK
nodes (no kubelet is needed to allocate) and a DeviceClass for its driver; kube-controller-manager's
resourceclaim controller makes the claims of a Job's pods from a ResourceClaimTemplate (and
deletes them when the pods are done). What is checked:

- a gang of 8 binds whole, and every claim is allocated and reserved for its pod before the
  first member binds: read on the watch, by resourceVersion (one etcd orders every write);
- a gang that does not fit leaves every claim unallocated and unreserved, and says why in
  devices;
- a restart mid-way (the scheduler killed right after its third claim write, before any
  binding) ends with the gang bound whole, the claims written before the crash kept as they
  were, no device given twice;
- kube-scheduler's DynamicResources plugin scheduling other pods on the same devices at the same
  time: no device is allocated twice.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster import controllermanager as kcm

from .conftest import REPO, SchedulerProcess
from .kube import bound, condition, create, pod, podgroup, pods, wait_for
from .kube_scheduler import KubeScheduler

Nodes = Callable[..., dict[str, str]]
RESOURCE = "resource.k8s.io/v1"
STEP = 90.0


@pytest.fixture(scope="module")
def claims_controller(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """kube-controller-manager with the Job controller, the garbage collector and the
    resourceclaim controller (claims from templates, reservations of pods that are gone)."""
    control_plane.start_controller_manager(
        (kcm.JOB, kcm.GARBAGE_COLLECTOR, "resourceclaim-controller")
    )
    try:
        yield control_plane
    finally:
        control_plane.stop_controller_manager()


def driver_class(cp: ControlPlane, name: str, driver: str, **spec: Any) -> str:
    """A DeviceClass ``name`` of every device of ``driver``; ``spec``: more of its spec."""
    create(
        cp,
        {
            "apiVersion": RESOURCE,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}],
                **spec,
            },
        },
    )
    return name


def node_slice(cp: ControlPlane, driver: str, node: str, devices: list[dict[str, Any]]) -> str:
    """A ResourceSlice of ``devices`` for ``node``, in a pool of its own named for the node;
    returns its name."""
    name = f"{node}-{driver}"
    create(
        cp,
        {
            "apiVersion": RESOURCE,
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        },
    )
    return name


class Driver:
    """The fake DRA driver of one test: driver ``<ns>.gpu.example.com``, a DeviceClass of the
    same name, one pool and one ResourceSlice per node."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.cp, self.ns = cp, ns
        self.name = f"{ns}.gpu.example.com"
        self.made: list[tuple[str, str]] = []
        self.made.append(("deviceclass", driver_class(cp, self.name, self.name)))

    def publish(self, node: str, gpus: int, model: str = "h100", **device: Any) -> None:
        """``gpus`` devices on ``node``; ``device``: more fields of each device (such as its
        binding conditions)."""
        devices = [
            {
                "name": f"gpu-{i}",
                "attributes": {
                    "index": {"int": i},
                    "model": {"string": model},
                    "driverVersion": {"version": "1.2.3"},
                },
                "capacity": {"memory": {"value": "80Gi"}},
                **device,
            }
            for i in range(gpus)
        ]
        self.made.append(("resourceslice", node_slice(self.cp, self.name, node, devices)))

    def extended_class(self, resource: str) -> str:
        """A second DeviceClass of the driver's devices that serves the extended resource
        ``resource`` (DRA extended resources): pods asking for it get their devices through
        a claim the scheduler makes."""
        name = f"{self.name}.extended"
        driver_class(self.cp, name, self.name, extendedResourceName=resource)
        self.made.append(("deviceclass", name))
        return name

    def template(self, name: str, count: int = 1) -> None:
        create(
            self.cp,
            {
                "apiVersion": RESOURCE,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {
                                    "name": "gpu",
                                    "exactly": {"deviceClassName": self.name, "count": count},
                                }
                            ]
                        }
                    }
                },
            },
        )

    def claim(self, name: str, count: int = 1) -> dict[str, Any]:
        return create(
            self.cp,
            {
                "apiVersion": RESOURCE,
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": self.ns},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": self.name, "count": count},
                            }
                        ]
                    }
                },
            },
        )

    def remove(self) -> None:
        for kind, name in self.made:
            self.cp.kubectl("delete", kind, name, "--wait=false", check=False)


@pytest.fixture
def driver(claims_controller: ControlPlane, ns: str) -> Iterator[Driver]:
    d = Driver(claims_controller, ns)
    yield d
    d.remove()


@pytest.fixture
def dra_nodes(
    claims_controller: ControlPlane, ns: str, nodes: Nodes, driver: Driver
) -> Callable[[int, int], dict[str, str]]:
    """``dra_nodes(count, gpus)``: KWOK nodes with no ``nvidia.com/gpu`` and ``gpus`` DRA
    devices each; returns their node selector."""

    def make(count: int, gpus: int) -> dict[str, str]:
        sel = nodes(count, gpus=0)
        names = [
            n["metadata"]["name"]
            for n in claims_controller.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
        ]
        for name in sorted(names):
            driver.publish(name, gpus)
        return sel

    return make


class Watch:
    """``kubectl get <resource> --watch`` in the background: every event, in order."""

    def __init__(self, cp: ControlPlane, resource: str, ns: str) -> None:
        argv = [
            str(cp.bin_dir / "kubectl"),
            f"--kubeconfig={cp.kubeconfig}",
            "get",
            resource,
            "-n",
            ns,
            "--watch",
            "--output-watch-events",
            "-o",
            "json",
        ]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.events: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder = json.JSONDecoder()
        buf = ""
        for line in self.proc.stdout:
            buf += line
            while buf.strip():
                try:
                    obj, end = decoder.raw_decode(buf.lstrip())
                except json.JSONDecodeError:
                    break
                buf = buf.lstrip()[end:]
                self.events.append(obj)

    def objects(self) -> list[dict[str, Any]]:
        return [e["object"] for e in list(self.events) if e.get("type") != "ERROR"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self._thread.join(10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def watches(claims_controller: ControlPlane, ns: str) -> Iterator[Callable[[str], Watch]]:
    started: list[Watch] = []

    def start(resource: str) -> Watch:
        w = Watch(claims_controller, resource, ns)
        started.append(w)
        return w

    yield start
    for w in started:
        w.stop()


def rv(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


def job(name: str, ns: str, size: int, sel: dict[str, str], template: str) -> dict[str, Any]:
    spec = pod("t", ns, group=name, gpus=0, selector=sel)["spec"]
    spec["restartPolicy"] = "Never"
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    spec["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "completionMode": "Indexed",
            "completions": size,
            "parallelism": size,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"gangsched.io/pod-group": name, "app": name}},
                "spec": spec,
            },
        },
    }


def claim_pod(name: str, ns: str, claim: str, sel: dict[str, str], **kw: Any) -> dict[str, Any]:
    body = pod(name, ns, gpus=0, selector=sel, **kw)
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return body


def claims(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    items = cp.kubectl_json("get", "resourceclaims", "-n", ns)["items"]
    return {c["metadata"]["name"]: c for c in items}


def devices_of(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return [
        (r["driver"], r["pool"], r["device"])
        for r in (alloc.get("devices") or {}).get("results", [])
    ]


def allocated_node(claim: dict[str, Any]) -> str:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    terms = (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    for t in terms:
        for f in t.get("matchFields") or []:
            if f.get("key") == "metadata.name":
                return str(f["values"][0])
    return ""


def no_device_twice(all_claims: list[dict[str, Any]]) -> None:
    taken = Counter(d for c in all_claims for d in devices_of(c))
    twice = {d: n for d, n in taken.items() if n > 1}
    assert not twice, f"devices allocated more than once: {twice}"


def unbound_reason(p: dict[str, Any]) -> str:
    c = condition(p, "PodScheduled") or {}
    return str(c.get("message", ""))


def claim_gang(
    cp: ControlPlane, driver: Driver, ns: str, name: str, size: int, sel: dict[str, str]
) -> None:
    """A gang of ``size`` pods, each with a claim of one device of ``driver`` of its own."""
    for i in range(size):
        driver.claim(f"c{i}")
    create(cp, podgroup(name, ns, size))
    for i in range(size):
        create(cp, claim_pod(f"{name}-{i}", ns, f"c{i}", sel, group=name))


def waits_unbound(cp: ControlPlane, ns: str) -> None:
    """Every pod says why it waits; a few more attempts later, none is bound."""
    wait_for(
        "the gang to say why it waits",
        lambda: all("Unschedulable" in unbound_reason(p) for p in pods(cp, ns).values()),
        timeout=STEP,
    )
    time.sleep(3)  # a few more attempts
    assert bound(cp, ns) == {}


Objects = dict[str, dict[str, Any]]


def written_before_binding(pod_watch: Watch, claim_watch: Watch, n: int) -> tuple[Objects, Objects]:
    """Once the watches show ``n`` bindings and ``n`` allocated claims: each claim as first
    allocated and reserved, and each pod as first bound (read from the watch: once pods
    finish, the resourceclaim controller deletes their claims); every claim was allocated and
    reserved before the first member bound."""
    wait_for(
        f"the watches to show the {n} bindings and claims",
        lambda: (
            len({p["metadata"]["name"] for p in pod_watch.objects() if p["spec"].get("nodeName")})
            == n
            and len({c["metadata"]["name"] for c in claim_watch.objects() if devices_of(c)}) >= n
        ),
    )
    first_binding = min(rv(p) for p in pod_watch.objects() if p["spec"].get("nodeName"))
    ready: Objects = {}
    for c in claim_watch.objects():
        if devices_of(c) and (c.get("status") or {}).get("reservedFor"):
            ready.setdefault(c["metadata"]["name"], c)
    assert len(ready) == n, list(ready)
    assert max(rv(c) for c in ready.values()) < first_binding
    at_binding: Objects = {}
    for p in pod_watch.objects():
        if p["spec"].get("nodeName"):
            at_binding.setdefault(p["metadata"]["name"], p)
    assert len(at_binding) == n
    return ready, at_binding


# ---- the tests -------------------------------------------------------------------------------
def test_a_job_gang_of_8_binds_whole_with_every_claim_written_before_the_first_binding(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
    watches: Callable[[str], Watch],
) -> None:
    cp = claims_controller
    sel = dra_nodes(2, 4)
    driver.template("one-gpu")
    pod_watch, claim_watch = watches("pods"), watches("resourceclaims")
    create(cp, podgroup("train", ns, 8))
    create(cp, job("train", ns, 8, sel, "one-gpu"))
    wait_for("the gang of 8 bound", lambda: len(bound(cp, ns)) == 8, timeout=STEP)
    # every claim was allocated and reserved for its pod before the first member bound
    ready, at_binding = written_before_binding(pod_watch, claim_watch, 8)
    # each pod runs where its claim was allocated, the claim reserved for it alone, on
    # devices no other claim holds
    placed = {n: p["spec"]["nodeName"] for n, p in at_binding.items()}
    for p in at_binding.values():
        [status] = p["status"]["resourceClaimStatuses"]
        claim = ready[status["resourceClaimName"]]
        assert allocated_node(claim) == placed[p["metadata"]["name"]]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [p["metadata"]["uid"]]
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    no_device_twice(list(ready.values()))
    assert sorted(Counter(placed.values()).values()) == [4, 4]
    assert bound(cp, ns).keys() == placed.keys()

    # the Job's pods finish (kwok), and the resourceclaim controller deletes their claims
    wait_for("the claims of finished pods deleted", lambda: claims(cp, ns) == {}, timeout=STEP)


def test_a_gang_that_does_not_fit_leaves_every_claim_unallocated(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
) -> None:
    cp = claims_controller
    sel = dra_nodes(3, 2)  # 6 devices for a gang of 8
    claim_gang(cp, driver, ns, "big", 8, sel)
    waits_unbound(cp, ns)
    for c in claims(cp, ns).values():
        assert not (c.get("status") or {}).get("allocation"), c
        assert not (c.get("status") or {}).get("reservedFor"), c
    why = unbound_reason(pods(cp, ns)["big-0"])
    assert (
        f"needs 8 device(s) of class {driver.name} for 8 more member(s) (minMember 8); 6 free"
        in why
    ), why

    # two more devices: the same gang now binds whole
    extra = ",".join(f"{k}={v}" for k, v in sel.items())
    names = [n["metadata"]["name"] for n in cp.kubectl_json("get", "nodes", "-l", extra)["items"]]
    cp.kubectl("delete", "resourceslice", f"{sorted(names)[0]}-{driver.name}")
    driver.made.remove(("resourceslice", f"{sorted(names)[0]}-{driver.name}"))
    driver.publish(sorted(names)[0], 4)
    wait_for("the gang bound once it fits", lambda: len(bound(cp, ns)) == 8, timeout=STEP)
    no_device_twice(list(claims(cp, ns).values()))


def test_a_restart_between_claim_writes_binds_the_gang_whole_writing_nothing_twice(
    claims_controller: ControlPlane,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
    tmp_path: Path,
) -> None:
    cp = claims_controller
    sel = dra_nodes(2, 4)
    name = f"gangsched-{ns}"
    first = SchedulerProcess(
        cp,
        tmp_path / "first.log",
        "--scheduler-name",
        name,
        env={"GANGSCHED_FAILPOINTS": "claims.written=3"},
    ).start()
    second: SchedulerProcess | None = None
    try:
        for i in range(8):
            driver.claim(f"c{i}")
        create(cp, podgroup("g", ns, 8))
        for i in range(8):
            create(cp, claim_pod(f"g-{i}", ns, f"c{i}", sel, group="g", scheduler=name))
        wait_for("the first scheduler killed at its third claim write", lambda: not first.alive())
        written = {n: devices_of(c) for n, c in claims(cp, ns).items() if devices_of(c)}
        # the gang's claims are written concurrently: the third accepted, others maybe too
        assert len(written) >= 3, written
        assert bound(cp, ns) == {}
        second = SchedulerProcess(cp, tmp_path / "second.log", "--scheduler-name", name).start()
        wait_for("the gang bound whole", lambda: len(bound(cp, ns)) == 8, timeout=STEP)
        now = claims(cp, ns)
        for n, devices in written.items():
            assert devices_of(now[n]) == devices, "a claim written before the crash was moved"
        no_device_twice(list(now.values()))
        placed = bound(cp, ns)
        for i in range(8):
            assert allocated_node(now[f"c{i}"]) == placed[f"g-{i}"]
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_with_kube_scheduler_on_the_same_devices_no_device_is_allocated_twice(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
    tmp_path: Path,
) -> None:
    cp = claims_controller
    if not KubeScheduler.available(cp):
        pytest.skip("kube-scheduler is not built (hack/control-plane.sh builds it)")
    sel = dra_nodes(4, 4)  # 16 devices
    ks = KubeScheduler(cp, tmp_path / "kube-scheduler.log").start()
    try:
        # 2 gangs of 4 through gangsched and 8 lone pods through kube-scheduler, all at once
        for g in ("a", "b"):
            create(cp, podgroup(g, ns, 4))
        for i in range(8):
            driver.claim(f"ks-{i}")
        for g in ("a", "b"):
            for i in range(4):
                driver.claim(f"{g}-{i}")
        for i in range(4):
            for g in ("a", "b"):
                create(cp, claim_pod(f"{g}-{i}", ns, f"{g}-{i}", sel, group=g))
            for j in (2 * i, 2 * i + 1):
                create(cp, claim_pod(f"ks-{j}", ns, f"ks-{j}", sel, scheduler="default-scheduler"))
        wait_for("all 16 pods bound", lambda: len(bound(cp, ns)) == 16, timeout=STEP)
        now = claims(cp, ns)
        no_device_twice(list(now.values()))
        placed = bound(cp, ns)
        for n, c in now.items():
            assert allocated_node(c) == placed[n]
    finally:
        ks.stop()


def test_the_integration_example_places_the_gang_in_one_clique(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    watches: Callable[[str], Watch],
) -> None:
    """docs/integrations/dra.md's manifest, as written (in this test's namespace), on KWOK
    nodes whose H100s a fake ``gpu.nvidia.com`` driver publishes: clique A has 4 nodes of 8
    (32 GPUs, what the gang needs), clique B 2 nodes of 8 H100s and a node of A100s. A fake
    fabric driver publishes one NVLink domain device per clique, in a slice whose node
    selector is the clique label: the gang's shared claim is allocated once, for clique A's
    nodes, and reserved for all 8 members."""
    cp = claims_controller
    text = (REPO / "docs" / "integrations" / "dra.md").read_text()
    manifest = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    objs = [o for o in yaml.safe_load_all(manifest) if o]
    nv = "gpu.nvidia.com"
    if cp.kubectl("get", "deviceclass", nv, check=False).returncode == 0:
        pytest.skip("a DeviceClass gpu.nvidia.com exists already on this control plane")
    layout = [("a", "NVIDIA H100 80GB HBM3")] * 4 + [("b", "NVIDIA H100 80GB HBM3")] * 2
    layout.append(("b", "NVIDIA A100-SXM4-80GB"))
    made: list[tuple[str, str]] = []
    claim_watch = watches("resourceclaims")
    try:
        for i, (clique, product) in enumerate(layout):
            name = f"{ns}-c{clique}{i}"
            labels = {"e2e-test": ns, "nvidia.com/gpu.clique": f"{ns}-{clique}"}
            cp.add_fake_node(name, "64", "512Gi", 0, labels=labels)
            made.append(("node", name))
            devices = [
                {
                    "name": f"gpu-{d}",
                    "attributes": {"productName": {"string": product}, "index": {"int": d}},
                }
                for d in range(8)
            ]
            made.append(("resourceslice", node_slice(cp, nv, name, devices)))
        fabric = "nvlink-domain.example.com"
        for clique in ("a", "b"):
            slice_name = f"{ns}-clique-{clique}-{fabric}"
            term = {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.clique", "operator": "In", "values": [f"{ns}-{clique}"]}
                ]
            }
            create(
                cp,
                {
                    "apiVersion": RESOURCE,
                    "kind": "ResourceSlice",
                    "metadata": {"name": slice_name},
                    "spec": {
                        "driver": fabric,
                        "pool": {
                            "name": f"{ns}-clique-{clique}",
                            "generation": 1,
                            "resourceSliceCount": 1,
                        },
                        "nodeSelector": {"nodeSelectorTerms": [term]},
                        "devices": [{"name": "domain"}],
                    },
                },
            )
            made.append(("resourceslice", slice_name))
        for obj in objs:
            if obj["kind"] == "DeviceClass":
                made.append(("deviceclass", obj["metadata"]["name"]))
            else:
                obj["metadata"]["namespace"] = ns
            if obj["kind"] == "Job":  # the test's nodes only (and their kwok taint)
                spec = obj["spec"]["template"]["spec"]
                spec["nodeSelector"] = {"e2e-test": ns}
                spec["tolerations"] = [{"operator": "Exists", "effect": "NoSchedule"}]
            create(cp, obj)
        wait_for("the gang of 8 bound", lambda: len(bound(cp, ns)) >= 8, timeout=STEP)
        placed = bound(cp, ns)
        assert {n.split("-c")[-1][0] for n in placed.values()} == {"a"}, placed
        assert sorted(Counter(placed.values()).values()) == [2, 2, 2, 2]

        # read on the watch: KWOK ends the pods soon, and the resourceclaim controller then
        # takes them off the shared claim and deallocates it
        def domain_versions() -> list[dict[str, Any]]:
            return [
                c
                for c in claim_watch.objects()
                if c["metadata"]["name"] == "train-domain" and devices_of(c)
            ]

        wait_for("the watch to show the shared claim allocated", lambda: bool(domain_versions()))
        first = domain_versions()[0]
        assert devices_of(first) == [(fabric, f"{ns}-clique-a", "domain")]
        assert first["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"] == [
            {
                "matchExpressions": [
                    {"key": "nvidia.com/gpu.clique", "operator": "In", "values": [f"{ns}-a"]}
                ]
            }
        ]
        # allocated and reserved for all 8 in its first write
        reserved = {r["name"] for r in first["status"]["reservedFor"]}
        assert reserved == set(placed), (reserved, placed)
    finally:
        cp.kubectl("delete", "job", "train", "-n", ns, "--wait=false", check=False)
        for kind in ("resourceslice", "deviceclass", "node"):
            names = [n for k, n in made if k == kind]
            if names:
                cp.kubectl("delete", kind, *names, "--wait=false", check=False)


def test_a_gang_binds_only_once_its_devices_report_their_binding_conditions(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    nodes: Nodes,
    watches: Callable[[str], Watch],
) -> None:
    """Binding conditions (DRADeviceBindingConditions, on in v1.36): the fake driver publishes
    two devices that must be attached before use. Both claims of a gang of 2 are allocated
    with the devices' conditions copied into their results, and no member binds until the
    driver (the test) reports ``Attached`` on both devices in the claims' status: read on the
    watch, every binding comes after the second report."""
    cp = claims_controller
    sel = nodes(1, gpus=0)
    [node] = [
        n["metadata"]["name"]
        for n in cp.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
    ]
    driver.publish(
        node, 2, bindingConditions=["Attached"], bindingFailureConditions=["AttachFailed"]
    )
    pod_watch = watches("pods")
    driver.claim("a")
    driver.claim("b")
    create(cp, podgroup("pair", ns, 2))
    create(cp, claim_pod("p0", ns, "a", sel, group="pair"))
    create(cp, claim_pod("p1", ns, "b", sel, group="pair"))
    wait_for(
        "both claims allocated",
        lambda: all(devices_of(c) for c in claims(cp, ns).values()) and len(claims(cp, ns)) == 2,
        timeout=STEP,
    )
    for c in claims(cp, ns).values():
        [result] = c["status"]["allocation"]["devices"]["results"]
        assert result["bindingConditions"] == ["Attached"]
        assert result["bindingFailureConditions"] == ["AttachFailed"]
    time.sleep(3)
    assert bound(cp, ns) == {}, "a member bound before its devices were attached"
    reported = 0
    for claim_name, c in sorted(claims(cp, ns).items()):
        [(drv, pool, dev)] = devices_of(c)
        patch = {
            "status": {
                "devices": [
                    {
                        "driver": drv,
                        "pool": pool,
                        "device": dev,
                        "conditions": [
                            {
                                "type": "Attached",
                                "status": "True",
                                "reason": "Attached",
                                "message": "attached by the test's driver",
                                "lastTransitionTime": "2026-11-27T00:00:00Z",
                            }
                        ],
                    }
                ]
            }
        }
        out = cp.kubectl(
            "patch",
            "resourceclaim",
            claim_name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(patch),
            "-o",
            "json",
        )
        reported = max(reported, rv(json.loads(out.stdout)))
        if claim_name == "a":  # one device attached, the other not yet
            time.sleep(2)
            assert bound(cp, ns) == {}, "a member bound with one device still detached"
    wait_for("the gang bound", lambda: len(bound(cp, ns)) == 2, timeout=STEP)
    wait_for(
        "the watch to show both bindings",
        lambda: (
            len({p["metadata"]["name"] for p in pod_watch.objects() if p["spec"].get("nodeName")})
            == 2
        ),
        timeout=STEP,
    )
    first_binding = min(rv(p) for p in pod_watch.objects() if p["spec"].get("nodeName"))
    assert first_binding > reported


def extended_pod(name: str, ns: str, resource: str, n: int, sel: dict[str, str], **kw: Any) -> Any:
    body = pod(name, ns, gpus=0, selector=sel, **kw)
    res = body["spec"]["containers"][0]["resources"]
    res["requests"][resource] = str(n)
    res["limits"][resource] = str(n)
    return body


def test_pods_asking_an_extended_resource_get_claims_made_before_they_bind(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
    watches: Callable[[str], Watch],
) -> None:
    """DRA extended resources: a gang of 4 pods asking ``<ns>.example.com/gpu: 1`` (served by
    a DeviceClass, offered as allocatable by no node) binds whole; each pod's claim was made
    by gangsched (annotated, owned by the pod), allocated on its node and reserved for it,
    and the pod's status named it, before the first member bound. A pod that does not fit
    then gets no claim."""
    cp = claims_controller
    sel = dra_nodes(2, 2)
    resource = f"{ns}.example.com/gpu"
    driver.extended_class(resource)
    pod_watch, claim_watch = watches("pods"), watches("resourceclaims")
    create(cp, podgroup("ext", ns, 4))
    for i in range(4):
        create(cp, extended_pod(f"ext-{i}", ns, resource, 1, sel, group="ext"))
    wait_for("the gang of 4 bound", lambda: len(bound(cp, ns)) == 4, timeout=STEP)
    ready, at_binding = written_before_binding(pod_watch, claim_watch, 4)
    for name, p in at_binding.items():
        status = p["status"].get("extendedResourceClaimStatus")
        assert status, f"pod {name} bound before its status named its claim"
        claim = ready[status["resourceClaimName"]]
        assert status["requestMappings"] == [
            {
                "containerName": "main",
                "resourceName": resource,
                # (cpu, memory and the resource, sorted: the resource is the third name)
                "requestName": "container-0-request-2",
            }
        ]
        meta = claim["metadata"]
        assert meta["name"].startswith(f"{name}-extended-resources-")
        assert meta["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        [owner] = meta["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "Pod",
            p["metadata"]["uid"],
            True,
        )
        assert allocated_node(claim) == p["spec"]["nodeName"]
        assert [r["uid"] for r in claim["status"]["reservedFor"]] == [p["metadata"]["uid"]]
        [request] = claim["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == f"{driver.name}.extended"
    no_device_twice(list(ready.values()))

    # every device is taken: one more pod waits, and no claim is made for it
    create(cp, podgroup("more", ns, 1))
    create(cp, extended_pod("more-0", ns, resource, 1, sel, group="more"))
    wait_for(
        "the fifth pod reported unschedulable",
        lambda: "device" in unbound_reason(pods(cp, ns)["more-0"]),
        timeout=STEP,
    )
    assert not [n for n in claims(cp, ns) if n.startswith("more-0-")]
    assert len(claims(cp, ns)) == 4


def _shapes(resource: str, implicit: str) -> dict[str, dict[str, Any]]:
    """Pod specs (containers only) whose extended resources lay out differently: init
    containers that reuse later containers' devices, a sidecar, two resources."""

    def c(name: str, n: int = 0, other: int = 0, sidecar: bool = False) -> dict[str, Any]:
        req: dict[str, str] = {"cpu": "100m", "memory": "64Mi"}
        if n:
            req[resource] = str(n)
        if other:
            req[implicit] = str(other)
        lim = {k: v for k, v in req.items() if k not in ("cpu", "memory")}
        body: dict[str, Any] = {
            "name": name,
            "image": "registry.invalid/train:1",
            "resources": {"requests": req, "limits": lim},
        }
        if sidecar:
            body["restartPolicy"] = "Always"
        return body

    return {
        "plain": {"containers": [c("main", 2)]},
        "init-reuses": {"initContainers": [c("prep", 3)], "containers": [c("main", 1)]},
        "sidecar": {
            "initContainers": [c("side", 1, sidecar=True), c("prep", 2)],
            "containers": [c("main", 1)],
        },
        "two-inits": {
            "initContainers": [c("a", 1), c("b", 2)],
            "containers": [c("main"), c("helper", 1)],
        },
        "two-resources": {"containers": [c("main", 1, other=1), c("aux", 1)]},
    }


def test_extended_resource_claims_are_laid_out_as_kube_scheduler_lays_them_out(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
    tmp_path: Path,
) -> None:
    """Differential, against kube-scheduler v1.36's DynamicResources plugin: for each pod
    shape, the claim gangsched makes asks the same devices under the same request names, and
    the pod's status maps the same containers to them."""
    cp = claims_controller
    if not KubeScheduler.available(cp):
        pytest.skip("kube-scheduler is not built (hack/control-plane.sh builds it)")
    sel = dra_nodes(4, 8)
    resource = f"{ns}.example.com/gpu"
    extended_class = driver.extended_class(resource)
    implicit = f"deviceclass.resource.kubernetes.io/{driver.name}"
    shapes = _shapes(resource, implicit)
    ks = KubeScheduler(cp, tmp_path / "kube-scheduler.log").start()
    try:
        for shape, containers in shapes.items():
            for who, scheduler in (("gs", "gangsched"), ("ks", "default-scheduler")):
                body = pod(f"{who}-{shape}", ns, gpus=0, selector=sel, scheduler=scheduler)
                body["spec"].pop("containers")
                body["spec"].update(containers)
                create(cp, body)
        wait_for("every pod bound", lambda: len(bound(cp, ns)) == 2 * len(shapes), timeout=STEP)
        now = pods(cp, ns)
        made = claims(cp, ns)
        no_device_twice(list(made.values()))

        def layout(name: str) -> tuple[Any, ...]:
            p = now[name]
            status = p["status"]["extendedResourceClaimStatus"]
            claim = made[status["resourceClaimName"]]
            assert allocated_node(claim) == p["spec"]["nodeName"]
            owner = claim["metadata"]["ownerReferences"][0]
            assert owner["uid"] == p["metadata"]["uid"] and owner["controller"] is True
            requests = [
                (r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"])
                for r in claim["spec"]["devices"]["requests"]
            ]
            mappings = [
                (m["containerName"], m["resourceName"], m["requestName"])
                for m in status["requestMappings"]
            ]
            return requests, mappings, len(devices_of(claim))

        for shape in shapes:
            ours, theirs = layout(f"gs-{shape}"), layout(f"ks-{shape}")
            assert ours == theirs, (shape, ours, theirs)
        assert {c for r in layout("gs-two-resources")[0] for c in r[1:2]} == {
            extended_class,
            driver.name,
        }
    finally:
        ks.stop()


# ---- consumable capacity, against kube-scheduler ------------------------------------------
GIB = 1024**3

# (devices: (allowMultipleAllocations, memory Gi, request policy, numa), pods: each one claim:
# (count, memory asked in Gi or None, distinct numa)); the number of pods that bind is compared
CAPACITY_CASES: list[tuple[list[tuple[bool, int, dict[str, Any] | None, int]], list[Any]]] = [
    # shared while 80 Gi lasts: 30 + 30, not a third
    ([(True, 80, None, 0)], [(1, 30, False)] * 3),
    # asks of 15 Gi rounded up to 30 Gi by a range from 10 Gi in steps of 20 Gi
    (
        [(True, 80, {"default": "10Gi", "validRange": {"min": "10Gi", "step": "20Gi"}}, 0)],
        [(1, 15, False)] * 3,
    ),
    # valid values: nothing asked takes the default, 20 and 30 round up to 40
    (
        [(True, 80, {"default": "16Gi", "validValues": ["16Gi", "40Gi"]}, 0)],
        [(1, None, False), (1, 20, False), (1, 30, False)],
    ),
    # a device for one claim: the capacity asked must fit in it
    ([(False, 40, None, 0)], [(1, 60, False), (1, 30, False)]),
    # distinctAttribute: two devices of different numa nodes per claim
    ([(False, 80, None, 0), (False, 80, None, 0), (False, 80, None, 1)], [(2, None, True)] * 2),
    # one request of two devices: a device serves a request once
    ([(True, 80, None, 0)], [(2, 30, False)]),
    # ... but two devices allocatable many times serve it
    ([(True, 80, None, 0), (True, 80, None, 0)], [(2, 30, False)] * 2),
]


def test_consumable_capacity_is_allocated_as_kube_scheduler_allocates_it(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    tmp_path: Path,
) -> None:
    """Differential, against kube-scheduler v1.36 (DRAConsumableCapacity on by default): for
    each case, the same pods bind with either scheduler, the shares consume the same amounts,
    and no device's capacity is exceeded."""
    cp = claims_controller
    if not KubeScheduler.available(cp):
        pytest.skip("kube-scheduler is not built (hack/control-plane.sh builds it)")
    nodes(2, gpus=0)
    names = sorted(
        n["metadata"]["name"]
        for n in cp.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
    )
    copies = {"gs": ("gangsched", names[0]), "ks": ("default-scheduler", names[1])}
    made: list[tuple[str, str]] = []
    capacity: dict[tuple[str, str], int] = {}
    for who, (_, node) in copies.items():
        driver = f"{ns}-{who}.cc.example.com"
        made.append(("deviceclass", driver_class(cp, driver, driver)))
        devices = []
        for k, (devs, _) in enumerate(CAPACITY_CASES):
            for j, (multi, memory, policy, numa) in enumerate(devs):
                cap: dict[str, Any] = {"value": f"{memory}Gi"}
                if policy:
                    cap["requestPolicy"] = policy
                device: dict[str, Any] = {
                    "name": f"k{k}-d{j}",
                    "attributes": {"case": {"int": k}, "numa": {"int": numa}},
                    "capacity": {"memory": cap},
                }
                if multi:
                    device["allowMultipleAllocations"] = True
                devices.append(device)
                capacity[(driver, f"k{k}-d{j}")] = memory * GIB
        made.append(("resourceslice", node_slice(cp, driver, node, devices)))
    ks = KubeScheduler(cp, tmp_path / "kube-scheduler.log").start()
    try:
        for k, (_, pods_) in enumerate(CAPACITY_CASES):
            for j, (count, memory, distinct) in enumerate(pods_):
                for who, (scheduler, node) in copies.items():
                    driver = f"{ns}-{who}.cc.example.com"
                    exactly: dict[str, Any] = {
                        "deviceClassName": driver,
                        "count": count,
                        "selectors": [
                            {"cel": {"expression": f'device.attributes["{driver}"].case == {k}'}}
                        ],
                    }
                    if memory is not None:
                        exactly["capacity"] = {"requests": {"memory": f"{memory}Gi"}}
                    devices_spec: dict[str, Any] = {
                        "requests": [{"name": "gpu", "exactly": exactly}]
                    }
                    if distinct:
                        devices_spec["constraints"] = [{"distinctAttribute": f"{driver}/numa"}]
                    name = f"{who}-k{k}-{j}"
                    create(
                        cp,
                        {
                            "apiVersion": RESOURCE,
                            "kind": "ResourceClaim",
                            "metadata": {"name": name, "namespace": ns},
                            "spec": {"devices": devices_spec},
                        },
                    )
                    create(
                        cp,
                        claim_pod(
                            name,
                            ns,
                            name,
                            {"kubernetes.io/hostname": node},
                            scheduler=scheduler,
                        ),
                    )
                # one pod at a time per case and scheduler: the same order for both
                wait_for(
                    f"case {k} pod {j} decided by both",
                    lambda k=k, j=j: all(
                        pods(cp, ns)[f"{w}-k{k}-{j}"]["spec"].get("nodeName")
                        or unbound_reason(pods(cp, ns)[f"{w}-k{k}-{j}"])
                        for w in copies
                    ),
                    timeout=STEP,
                )
        now = pods(cp, ns)
        all_claims = claims(cp, ns)
        for k, (_, pods_) in enumerate(CAPACITY_CASES):
            verdicts = {
                w: [bool(now[f"{w}-k{k}-{j}"]["spec"].get("nodeName")) for j in range(len(pods_))]
                for w in copies
            }
            assert verdicts["gs"] == verdicts["ks"], (k, verdicts)
            shares = {}
            for w in copies:
                consumed = []
                for j in range(len(pods_)):
                    alloc = (all_claims[f"{w}-k{k}-{j}"].get("status") or {}).get("allocation")
                    for r in ((alloc or {}).get("devices") or {}).get("results", []):
                        amount = (r.get("consumedCapacity") or {}).get("memory")
                        consumed.append(-1 if amount is None else _gib(amount))
                shares[w] = sorted(consumed)
            assert shares["gs"] == shares["ks"], (k, shares)
        # no device gives more than it has
        used: Counter[tuple[str, str]] = Counter()
        for c in all_claims.values():
            alloc = (c.get("status") or {}).get("allocation") or {}
            for r in (alloc.get("devices") or {}).get("results", []):
                amount = (r.get("consumedCapacity") or {}).get("memory")
                if amount is not None:
                    used[(r["driver"], r["device"])] += _gib(amount)
        for device, amount in used.items():
            assert amount <= capacity[device], (device, amount)
    finally:
        ks.stop()
        for kind, name in made:
            cp.kubectl("delete", kind, name, "--wait=false", check=False)


def _gib(q: str) -> int:
    units = {"Gi": GIB, "Mi": 1024**2, "Ki": 1024}
    for suffix, factor in units.items():
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) * factor
    return int(q)


def test_a_device_taint_rule_keeps_its_devices_from_claims_until_it_goes(
    claims_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    driver: Driver,
    dra_nodes: Callable[[int, int], dict[str, str]],
) -> None:
    """A DeviceTaintRule (resource.k8s.io/v1beta2, which the 1.36 dev control plane serves)
    tainting one of 4 devices NoSchedule: a gang of 4 claims of one device each waits, none
    allocated; once the rule is deleted, the gang binds whole."""
    cp = claims_controller
    served = cp.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "name", check=False)
    if "devicetaintrules" not in str(served):
        pytest.skip("the API server does not serve DeviceTaintRules")
    sel = dra_nodes(2, 2)
    names = sorted(
        n["metadata"]["name"]
        for n in cp.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
    )
    rule = f"{ns}-maintenance"
    create(
        cp,
        {
            "apiVersion": "resource.k8s.io/v1beta2",
            "kind": "DeviceTaintRule",
            "metadata": {"name": rule},
            "spec": {
                "deviceSelector": {"driver": driver.name, "pool": names[1], "device": "gpu-0"},
                "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
            },
        },
    )
    try:
        claim_gang(cp, driver, ns, "g", 4, sel)
        waits_unbound(cp, ns)
        assert not any(devices_of(c) for c in claims(cp, ns).values())
    finally:
        cp.kubectl("delete", "devicetaintrule", rule, "--wait=false", check=False)
    wait_for("the gang bound once the rule went", lambda: len(bound(cp, ns)) == 4, timeout=STEP)
    no_device_twice(list(claims(cp, ns).values()))
