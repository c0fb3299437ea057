"""``kubectl gang``: the gangs in a cluster, with phase, members per role, the nodes they hold
and, for a gang that waits, why. Installed as the ``kubectl-gang`` executable, so kubectl
finds it as a plugin.

    kubectl gang [-n NAMESPACE | -A] [-o wide|json] [--kubeconfig PATH] [--context NAME]

Without ``-n`` or ``-A`` the namespace is the kubeconfig context's, as kubectl's (``default``
when the context names none).

Gangs are found from gangsched PodGroups and from member pods of every supported convention
(see docs/architecture.md, membership), so annotation-declared gangs show up too. PodGroups
and pods are read by the scheduler's own readers (``gangsched.api.podgroup``,
``gangsched.api.membership``), so MIN and an invalid spec are what the scheduler sees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gangsched.api.fields import SpecError, timestamp
from gangsched.api.membership import Membership, Source, resolve_membership, scheduling_group
from gangsched.api.podgroup import min_member_of, podgroup_from
from gangsched.core.model import GangSpec
from gangsched.core.status import (
    MEMBERS_LOST,
    count_members,
    counted,
    group_status,
    split_forecast,
)

__all__ = ["GangRow", "default_namespace", "gang_rows", "main", "render"]

# In a pod, without a kubeconfig: the namespace of the pod's ServiceAccount token.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

# What SOURCE shows for each membership convention (see docs/operations.md, kubectl gang).
SOURCES = {Source.GANGSCHED: "PodGroup"}
# PodScheduled reasons (the start of the condition's message) of pods gangsched refuses.
REFUSED = ("InvalidPod", "Unsupported")
# Reasons for which the scheduler has not tried to place the gang.
NOT_ATTEMPTED = frozenset(
    {"WaitingForMembers", "PodGroupNotFound", "InvalidSpec", "SchedulingGated", "Pending"}
)


@dataclass
class GangRow:
    namespace: str
    name: str
    source: str
    phase: str
    min_member: int  # 0: not known (no PodGroup, or its minMember is invalid)
    members: dict[str, int] = field(default_factory=dict)  # role -> pods
    bound: dict[str, int] = field(default_factory=dict)  # role -> bound pods
    nodes: dict[str, int] = field(default_factory=dict)  # node -> member pods on it
    why: str = ""
    # A pod gangsched refuses, in a row of its own: the pod, and its gang when it names one
    pod: str = ""
    gang: str = ""
    # The PodGroup's spec.minMember is not one the scheduler accepts (not an integer from 1
    # to MAX_MEMBERS): MIN shows "invalid", never a made-up 1 or a number too long to read.
    min_member_invalid: bool = False
    # The scheduler's start forecast (status.expectedStart), "unknown" when it could give no
    # time (status.expectedStartBasis says why), "" when it made none
    expected: str = ""


def _min_member(spec: Mapping[str, Any]) -> int:
    """A PodGroup's spec.minMember as the scheduler reads it (1 when absent), 0 when invalid."""
    try:
        return min_member_of(spec)
    except SpecError:
        return 0


def _role_text(members: Mapping[str, int], bound: Mapping[str, int]) -> str:
    parts = [f"{r or '-'}={bound.get(r, 0)}/{n}" for r, n in sorted(members.items())]
    return ",".join(parts) or "-"


def _waiting(pod: Mapping[str, Any]) -> tuple[str, str, tuple[str, str] | None] | None:
    """(reason, message, start forecast) of an unbound pod's ``PodScheduled=False``
    condition, whose message gangsched writes as ``<reason>: <message>``, ended by the gang's
    forecast when it has one."""
    if (pod.get("spec") or {}).get("nodeName"):
        return None
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            text, expected = split_forecast(str(c.get("message", "")))
            reason, sep, message = text.partition(": ")
            if sep and reason.isalpha():
                return reason, message, expected
            return str(c.get("reason", "")), text, expected
    return None


def _condition(pg: Mapping[str, Any]) -> Mapping[str, Any]:
    for c in (pg.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Scheduled":
            found: Mapping[str, Any] = c
            return found
    return {}


@dataclass(slots=True)
class _Gathered:
    """What the PodGroups and pods say, gang by gang, before the status rule runs."""

    rows: dict[str, GangRow] = field(default_factory=dict)
    objects: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    specs: dict[str, GangSpec] = field(default_factory=dict)  # as the scheduler reads each
    refused: list[GangRow] = field(default_factory=list)
    waiting: dict[str, Counter[tuple[str, str]]] = field(
        default_factory=lambda: defaultdict(Counter)
    )
    members: dict[str, list[tuple[str, bool]]] = field(default_factory=lambda: defaultdict(list))
    # the start forecast its pods' conditions say, for a gang without a gangsched PodGroup
    expected: dict[str, tuple[str, str]] = field(default_factory=dict)


def gang_rows(
    podgroups: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> list[GangRow]:
    """One row per gang (gangsched PodGroups, and gangs their pods declare), phase and WHY by
    the scheduler's rule (``group_status``) from the pods; one row per refused pod."""
    g = _Gathered()
    for pg in podgroups:
        _add_podgroup(g, pg)
    for pod in pods:
        _add_pod(g, pod)
    for key, row in g.rows.items():
        _settle(g, key, row)
    gangs = sorted(g.rows.values(), key=lambda r: (r.namespace, r.name))
    return sorted([*gangs, *g.refused], key=lambda r: (r.namespace, bool(r.pod), r.name))


def _add_podgroup(g: _Gathered, pg: Mapping[str, Any]) -> None:
    meta = pg.get("metadata") or {}
    spec = pg.get("spec") or {}
    key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    g.objects[key] = pg
    g.specs[key] = podgroup_from(pg)
    min_member = _min_member(spec if isinstance(spec, Mapping) else {})
    g.rows[key] = GangRow(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        source=SOURCES[Source.GANGSCHED],
        phase="",
        min_member=min_member,
        min_member_invalid=min_member == 0,
    )


def _add_pod(g: _Gathered, pod: Mapping[str, Any]) -> None:
    """The pod counted in its gang's row (a row for a gang only its pods declare), and a row
    of its own when the scheduler refuses it."""
    meta = pod.get("metadata") or {}
    ns = str(meta.get("namespace", ""))
    try:
        m = resolve_membership(
            ns,
            meta.get("labels") or {},
            meta.get("annotations") or {},
            timestamp(meta.get("creationTimestamp")),
            scheduling_group(pod.get("spec") or {}),
        )
    except ValueError as e:  # an unreadable spec.schedulingGroup
        m = Membership(error=str(e))
    said = _waiting(pod)
    why = said[:2] if said is not None else None
    refusal = ("InvalidPod", m.error) if m.error else why
    if refusal is not None and refusal[0] in REFUSED:
        reason, message = refusal
        g.refused.append(
            GangRow(
                namespace=ns,
                name=f"pod/{meta.get('name', '')}",
                source=SOURCES.get(m.source, m.source) or "-",
                phase=reason,
                min_member=0,
                why=message,
                pod=str(meta.get("name", "")),
                gang=m.key.partition("/")[2],
            )
        )
    if not m.key:
        return
    row = g.rows.get(m.key)
    if row is None:
        row = g.rows[m.key] = GangRow(
            namespace=ns,
            name=m.key.partition("/")[2],
            source=SOURCES.get(m.source, m.source),
            phase="",
            min_member=m.implicit.min_member if m.implicit else 1,
        )
        if m.source == Source.GANGSCHED:
            row.min_member = 0  # its PodGroup does not exist
    role = m.role
    row.members[role] = row.members.get(role, 0) + 1
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        row.bound[role] = row.bound.get(role, 0) + 1
        row.nodes[node] = row.nodes.get(node, 0) + 1
    phase = str((pod.get("status") or {}).get("phase", "Pending"))
    deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
    g.members[m.key].append(counted(phase, bool(node), deleting))
    if why is not None:
        g.waiting[m.key][why] += 1
    if said is not None and said[2] is not None:
        g.expected[m.key] = said[2]


def _settle(g: _Gathered, key: str, row: GangRow) -> None:
    """The row's phase and WHY, by the scheduler's status rule."""
    counts = count_members(g.members.get(key, []))
    obj = g.objects.get(key)
    common = g.waiting[key].most_common(1)
    if obj is not None:
        status = obj.get("status") or {}
        cond = _condition(obj)
        reason, message = str(cond.get("reason") or ""), str(cond.get("message") or "")
        attempted = bool(status.get("scheduleStartTime")) or bool(status.get("waiting"))
        at, basis = status.get("expectedStart"), status.get("expectedStartBasis")
        row.expected = str(at) if at else ("unknown" if basis else "")
        if not message and (problem := g.specs[key].invalid_reason):
            # the scheduler's word before it has written it (as core/cycle.py says it)
            reason, message = "InvalidSpec", f"PodGroup {key} is invalid: {problem}"
    else:
        reason, message = common[0][0] if common else ("", "")
        if (expected := g.expected.get(key)) is not None:
            row.expected = expected[0] or "unknown"
        attempted = any(r not in NOT_ATTEMPTED for r, _ in g.waiting[key])
        if row.min_member == 0 or reason == "PodGroupNotFound":
            # the PodGroup the pods name is missing: they wait for it
            row.min_member = 0
            row.phase = "Pending"
            row.why = message or f"PodGroup {key} does not exist; the pods wait until it is created"
            return
    st = group_status(
        row.min_member,
        counts,
        reason=reason,
        message=message,
        attempted=attempted,
        binding=True,
        lost=message if reason == MEMBERS_LOST else "",
    )
    row.phase = st.phase
    row.why = "" if st.scheduled else st.message


def render(rows: Sequence[GangRow], wide: bool, all_namespaces: bool) -> str:
    header = ["GANG", "PHASE", "MIN", "MEMBERS(bound/total)", "NODES"]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    if wide:
        header.insert(header.index("GANG") + 1, "SOURCE")
    header += ["EXPECTED-START", "WHY"]
    table = [header]
    for r in rows:
        nodes = ",".join(f"{n}({k})" for n, k in sorted(r.nodes.items())) or "-"
        if not wide and len(nodes) > 40:
            nodes = f"{len(r.nodes)} nodes"
        why = r.why if wide else r.why[:80]
        members = "-" if r.pod else _role_text(r.members, r.bound)
        least = "invalid" if r.min_member_invalid else str(r.min_member or "-")
        line = [r.name, r.phase, least, members, nodes]
        if all_namespaces:
            line.insert(0, r.namespace)
        if wide:
            line.insert(line.index(r.name) + 1, r.source)
        line += [r.expected or "-", why]
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "   " + row[-1]
        for row in table
    ).rstrip()


async def _fetch(
    kubeconfig: str | None, context: str | None, ns: str | None
) -> tuple[list[Any], list[Any]]:
    from gangsched.kube.io.client import ApiError, KubeClient, load_configuration

    client = KubeClient(await load_configuration(kubeconfig, context))
    try:
        base = f"/namespaces/{ns}" if ns else ""
        try:
            pgs = (await client.get(f"/apis/gangsched.io/v1alpha1{base}/podgroups")).get(
                "items"
            ) or []
        except ApiError as e:
            if e.status != 404:
                raise
            pgs = []
        pods = (await client.get(f"/api/v1{base}/pods")).get("items") or []
        return pgs, pods
    finally:
        await client.close()


def _kubeconfig_files(kubeconfig: str | None, env: Mapping[str, str]) -> list[Path]:
    """kubectl's loading rules: ``--kubeconfig``, else every file of ``$KUBECONFIG``, else
    ``~/.kube/config``; files that do not exist are skipped."""
    if kubeconfig:
        names = [kubeconfig]
    elif env.get("KUBECONFIG"):
        names = [n for n in env["KUBECONFIG"].split(os.pathsep) if n]
    else:
        names = [str(Path(env.get("HOME") or Path.home()) / ".kube" / "config")]
    return [p for p in (Path(n).expanduser() for n in names) if p.is_file()]


def _load(path: Path) -> Mapping[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return {}
    return data if isinstance(data, Mapping) else {}


def default_namespace(
    kubeconfig: str | None,
    context: str | None,
    env: Mapping[str, str] | None = None,
    service_account_namespace: Path = SERVICE_ACCOUNT_NAMESPACE,
) -> str:
    """The namespace kubectl would use without ``-n``: the chosen context's ``namespace``
    (``--context``, else the first ``current-context`` of the kubeconfig files, merged as
    kubectl merges them: the first file to define a context wins), ``default`` when it names
    none. With no kubeconfig file inside a pod: ``$POD_NAMESPACE``, else the ServiceAccount's
    namespace, else ``default`` (client-go's in-cluster rule)."""
    env = os.environ if env is None else env
    files = [_load(p) for p in _kubeconfig_files(kubeconfig, env)]
    if not files:
        if env.get("KUBERNETES_SERVICE_HOST"):
            if env.get("POD_NAMESPACE"):
                return env["POD_NAMESPACE"]
            try:
                found = service_account_namespace.read_text().strip()
            except OSError:
                found = ""
            if found:
                return found
        return "default"
    name = context or next(
        (str(f["current-context"]) for f in files if f.get("current-context")), ""
    )
    for f in files:
        for entry in f.get("contexts") or []:
            if isinstance(entry, Mapping) and entry.get("name") == name:
                ctx = entry.get("context") or {}
                ns = ctx.get("namespace") if isinstance(ctx, Mapping) else None
                return str(ns) if ns else "default"
    return "default"


def what_if_main(argv: Sequence[str]) -> int:
    """``kubectl gang what-if -f FILE``: what the scheduler would do with the gang in FILE (a
    PodGroup and its pods, or a Job or JobSet whose template makes them), from the live cluster,
    never writing (gangsched/kube/whatif.py)."""
    p = argparse.ArgumentParser(
        prog="kubectl gang what-if",
        description="What the scheduler would do with a gang (a PodGroup and its pods, or a "
        "Job or JobSet whose template makes them) if it "
        "were submitted now. Reads only; writes nothing.",
    )
    p.add_argument(
        "-f", "--filename", required=True, help="YAML: a PodGroup and its pods, Job or JobSet"
    )
    p.add_argument("-n", "--namespace", default=None, help="for objects that name none")
    p.add_argument("--config", default=None, help="the scheduler's configuration file")
    p.add_argument(
        "--config-namespace",
        default="gangsched-system",
        help="where to look for the scheduler's ConfigMap (default: gangsched-system)",
    )
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--context", default=None)
    args = p.parse_args(argv)
    try:
        with open(args.filename) as f:
            objs = [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
        ns = args.namespace or default_namespace(args.kubeconfig, args.context)
        text = asyncio.run(_what_if(args, objs, ns))
    except Exception as e:  # a CLI prints what went wrong instead of a traceback
        print(f"kubectl gang what-if: {e}", file=sys.stderr)
        return 1
    print(text)
    return 0


async def _what_if(args: argparse.Namespace, objs: list[dict[str, Any]], ns: str) -> str:
    from gangsched.kube.io.client import KubeClient, load_configuration
    from gangsched.kube.whatif import render_verdict, scheduler_settings, what_if

    client = KubeClient(await load_configuration(args.kubeconfig, args.context))
    try:
        settings, source = await scheduler_settings(client, args.config, args.config_namespace)
        verdict = await what_if(client, settings, objs, ns)
        return render_verdict(verdict) + f"\nsettings: {source}"
    finally:
        await client.close()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["what-if"]:
        return what_if_main(argv[1:])
    p = argparse.ArgumentParser(prog="kubectl gang", description="List gangs and why they wait.")
    p.add_argument(
        "-n", "--namespace", default=None, help="default: the kubeconfig context's namespace"
    )
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("-o", "--output", choices=["wide", "json"], default=None)
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--context", default=None)
    args = p.parse_args(argv)
    ns = None
    if not args.all_namespaces:
        ns = args.namespace or default_namespace(args.kubeconfig, args.context)
    try:
        pgs, pods = asyncio.run(_fetch(args.kubeconfig, args.context, ns))
    except Exception as e:  # a CLI prints what went wrong instead of a traceback
        print(f"kubectl gang: {e}", file=sys.stderr)
        return 1
    rows = gang_rows(pgs, pods)
    if args.output == "json":
        print(json.dumps([asdict(r) for r in rows], indent=2, sort_keys=True))
    elif not rows:
        print(f"No gangs found{'' if ns is None else f' in namespace {ns}'}.", file=sys.stderr)
    else:
        print(render(rows, args.output == "wide", ns is None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
