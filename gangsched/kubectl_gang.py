"""``kubectl gang``: the gangs in a cluster, with phase, members per role, the nodes they hold
and, for a gang that waits, why. Installed as the ``kubectl-gang`` executable, so kubectl
finds it as a plugin.

    kubectl gang [-n NAMESPACE | -A] [-o wide|json] [--kubeconfig PATH]

Gangs are found from gangsched PodGroups and from member pods of every supported convention
(see docs/architecture.md, membership), so annotation-declared gangs show up too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gangsched.core.status import MemberCounts, podgroup_phase
from gangsched.kube.membership import resolve_membership
from gangsched.kube.translate import timestamp

__all__ = ["GangRow", "gang_rows", "main", "render"]


@dataclass
class GangRow:
    namespace: str
    name: str
    source: str
    phase: str
    min_member: int
    members: dict[str, int] = field(default_factory=dict)  # role -> pods
    bound: dict[str, int] = field(default_factory=dict)  # role -> bound pods
    nodes: dict[str, int] = field(default_factory=dict)  # node -> member pods on it
    why: str = ""


def _role_text(members: Mapping[str, int], bound: Mapping[str, int]) -> str:
    parts = [f"{r or '-'}={bound.get(r, 0)}/{n}" for r, n in sorted(members.items())]
    return ",".join(parts) or "-"


def gang_rows(
    podgroups: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]]
) -> list[GangRow]:
    rows: dict[str, GangRow] = {}
    for pg in podgroups:
        meta = pg.get("metadata") or {}
        spec = pg.get("spec") or {}
        status = pg.get("status") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        group = str(pg.get("apiVersion", "gangsched.io/")).partition("/")[0]
        rows[key] = GangRow(
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            source=f"PodGroup({group})",
            phase=str(status.get("phase") or "Pending"),
            min_member=int(spec.get("minMember", 1) or 1),
            why=str(status.get("message") or ""),
        )
    waiting_reason: dict[str, Counter[str]] = defaultdict(Counter)
    counts: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for pod in pods:
        meta = pod.get("metadata") or {}
        ns = str(meta.get("namespace", ""))
        m = resolve_membership(
            ns,
            meta.get("labels") or {},
            meta.get("annotations") or {},
            timestamp(meta.get("creationTimestamp")),
        )
        if not m.key:
            continue
        row = rows.get(m.key)
        if row is None:
            row = rows[m.key] = GangRow(
                namespace=ns,
                name=m.key.partition("/")[2],
                source=m.source,
                phase="",
                min_member=m.implicit.min_member if m.implicit else 1,
            )
        role = m.role
        row.members[role] = row.members.get(role, 0) + 1
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            row.bound[role] = row.bound.get(role, 0) + 1
            row.nodes[node] = row.nodes.get(node, 0) + 1
        counts[m.key].append(pod)
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False":
                waiting_reason[m.key][str(c.get("message", ""))] += 1
    for key, row in rows.items():
        members = counts.get(key, [])
        phases = [str((p.get("status") or {}).get("phase", "Pending")) for p in members]
        if not row.phase:
            c = MemberCounts(
                total=len(members),
                scheduled=sum(row.bound.values()),
                running=phases.count("Running"),
                succeeded=phases.count("Succeeded"),
                failed=phases.count("Failed"),
            )
            row.phase = podgroup_phase(row.min_member, c, attempted=bool(waiting_reason[key]))
        if row.phase in ("Running", "Scheduled", "Succeeded"):
            row.why = ""
        elif not row.why and waiting_reason[key]:
            row.why = waiting_reason[key].most_common(1)[0][0]
    return sorted(rows.values(), key=lambda r: (r.namespace, r.name))


def render(rows: Sequence[GangRow], wide: bool, all_namespaces: bool) -> str:
    header = ["GANG", "PHASE", "MIN", "MEMBERS(bound/total)", "NODES"]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    if wide:
        header.insert(header.index("GANG") + 1, "SOURCE")
    header.append("WHY")
    table = [header]
    for r in rows:
        nodes = ",".join(f"{n}({k})" for n, k in sorted(r.nodes.items())) or "-"
        if not wide and len(nodes) > 40:
            nodes = f"{len(r.nodes)} nodes"
        why = r.why if wide else r.why[:80]
        line = [r.name, r.phase, str(r.min_member), _role_text(r.members, r.bound), nodes]
        if all_namespaces:
            line.insert(0, r.namespace)
        if wide:
            line.insert(line.index(r.name) + 1, r.source)
        line.append(why)
        table.append(line)
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "   " + row[-1]
        for row in table
    ).rstrip()


async def _fetch(
    kubeconfig: str | None, context: str | None, ns: str | None
) -> tuple[list[Any], list[Any]]:
    from gangsched.kube.client import ApiError, KubeClient, load_configuration

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


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="kubectl gang", description="List gangs and why they wait.")
    p.add_argument("-n", "--namespace", default=None)
    p.add_argument("-A", "--all-namespaces", action="store_true")
    p.add_argument("-o", "--output", choices=["wide", "json"], default=None)
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--context", default=None)
    args = p.parse_args(argv)
    ns = None if args.all_namespaces else (args.namespace or "default")
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
