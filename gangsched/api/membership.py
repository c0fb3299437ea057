"""Which gang a pod belongs to, from every convention users already have.

Checked in this order; the first that applies names the gang, and a pod that declares two
different gangs through different conventions is refused (it gets an event and stays pending):

1. gangsched: label ``gangsched.io/pod-group`` (PodGroup ``gangsched.io/v1alpha1``);
2. scheduler-plugins: label ``scheduling.x-k8s.io/pod-group`` (PodGroup
   ``scheduling.x-k8s.io/v1alpha1``, read when that CRD is installed);
3. Volcano / kube-batch: annotation ``scheduling.k8s.io/group-name`` (PodGroup
   ``scheduling.volcano.sh/v1beta1`` when installed); with ``scheduling.k8s.io/group-pod-num``
   and no such PodGroup, the annotations alone declare the gang;
4. labels ``pod-group/name`` + ``pod-group/min-available`` (scheduler-plugins' original
   Coscheduling proposal), or ``pod-group.scheduling.sigs.k8s.io/name`` +
   ``pod-group.scheduling.sigs.k8s.io/min-available`` (the same, as released scheduler-plugins
   versions spell them);
5. Koordinator: annotations ``gang.scheduling.koordinator.sh/{name,min-available,
   waiting-time,total-number,mode,groups}``;
6. upstream (``scheduling.k8s.io``, Kubernetes 1.36+): the pod spec's
   ``schedulingGroup.podGroupName`` (PodGroup ``scheduling.k8s.io/v1alpha2`` or ``v1beta1``,
   read when the API server serves it; see ``workloadapi.py``).

Conventions 1-3 and 6 name a PodGroup object; the others carry the gang's spec on the pod itself
(``implicit``). Roles come from ``gangsched.io/role``, else Volcano's ``volcano.sh/task-spec``.

A label or annotation under one of these conventions' prefixes that gangsched does not read (a
typo such as ``gangsched.io/podgroup``, a label set as an annotation, a feature of another
scheduler such as ``gang.scheduling.koordinator.sh/match-policy``) makes the declaration an
error: the pod is refused with the key named, rather than scheduled as a plain pod.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gangsched.api import labels as lbl
from gangsched.core.model import GangMode, GangSpec

__all__ = ["MAX_MEMBERS", "Membership", "Source", "resolve_membership", "scheduling_group"]

# The most members a gang may ask for: Kubernetes' PodGroup fields are int32 (the gangsched
# CRD's spec.minMember, the upstream gang.minCount). A larger minimum is refused.
MAX_MEMBERS = 2**31 - 1


class Source:
    GANGSCHED = "gangsched"
    XK8S = "scheduler-plugins"
    VOLCANO = "volcano"
    ANNOTATIONS = "annotations"  # group-name + group-pod-num, no PodGroup object
    LABELS = "labels"  # pod-group/name + pod-group/min-available
    KOORDINATOR = "koordinator"
    UPSTREAM = "upstream"  # spec.schedulingGroup.podGroupName, PodGroup scheduling.k8s.io


@dataclass(frozen=True, slots=True)
class Membership:
    key: str = ""  # "namespace/name"; empty for a plain pod
    source: str = ""
    role: str = ""
    implicit: GangSpec | None = None  # the spec, when the pod itself declares it
    error: str = ""


_DURATION = re.compile(
    r"^\s*(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?(?:(\d+(?:\.\d+)?)s)?\s*$"
)


def _duration(text: str) -> float:
    """A Go duration such as ``600s``, ``10m`` or ``1h30m``, or plain seconds."""
    try:
        value = float(text)
    except ValueError:
        m = _DURATION.match(text)
        if m is None or not any(m.groups()):
            raise ValueError(f"unreadable duration {text!r}") from None
        h, mi, s = (float(x) if x else 0.0 for x in m.groups())
        value = h * 3600 + mi * 60 + s
    if not value > 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return value


def _positive_int(text: str, what: str) -> int:
    shown = repr(text) if len(text) <= 24 else f"{text[:24]!r}... ({len(text)} characters)"
    try:
        n = int(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be a whole number, got {shown}") from None
    if n < 1:
        raise ValueError(f"{what} must be at least 1, got {n}")
    if n > MAX_MEMBERS:
        raise ValueError(f"{what} must be at most {MAX_MEMBERS}, got {shown}")
    return n


def scheduling_group(spec: Mapping[str, Any]) -> str:
    """A pod spec's ``schedulingGroup.podGroupName`` (the upstream convention); '' when absent.
    A value of the wrong type is a ValueError naming the field."""
    group = spec.get("schedulingGroup")
    if group is None:
        return ""
    if not isinstance(group, Mapping):
        raise ValueError("spec.schedulingGroup: expected an object")
    name = group.get("podGroupName")
    if name is None:
        return ""
    if not isinstance(name, str):
        raise ValueError("spec.schedulingGroup.podGroupName: expected a string")
    return name


def resolve_membership(
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    created: float,
    pod_group_name: str = "",
) -> Membership:
    role = labels.get(lbl.ROLE_LABEL) or annotations.get(lbl.VOLCANO_TASK_SPEC_ANNOTATION, "")
    unknown = _unknown_keys(labels, annotations)
    if unknown:
        return Membership(role=role, error=f"unknown gang declaration: {unknown}")
    found: list[Membership] = []
    try:
        if name := labels.get(lbl.POD_GROUP_LABEL):
            found.append(Membership(f"{namespace}/{name}", Source.GANGSCHED, role))
        if name := labels.get(lbl.XK8S_POD_GROUP_LABEL):
            found.append(Membership(f"{namespace}/{name}", Source.XK8S, role))
        if name := annotations.get(lbl.GROUP_NAME_ANNOTATION):
            key = f"{namespace}/{name}"
            implicit = None
            if num := annotations.get(lbl.GROUP_POD_NUM_ANNOTATION):
                n = _positive_int(num, lbl.GROUP_POD_NUM_ANNOTATION)
                implicit = GangSpec(key, n, created=created)
            # With the member count the annotations alone declare the gang; without it they
            # name a Volcano PodGroup.
            source = Source.VOLCANO if implicit is None else Source.ANNOTATIONS
            found.append(Membership(key, source, role, implicit))
        for name_label, min_label in (
            (lbl.POD_GROUP_NAME_LABEL, lbl.POD_GROUP_MIN_LABEL),
            (lbl.SIGS_POD_GROUP_NAME_LABEL, lbl.SIGS_POD_GROUP_MIN_LABEL),
        ):
            if name := labels.get(name_label):
                found.append(
                    _labelled(namespace, name, labels, name_label, min_label, role, created)
                )
        if name := annotations.get(lbl.KOORD_NAME):
            found.append(_koordinator(namespace, name, annotations, role, created))
        if pod_group_name:  # spec.schedulingGroup.podGroupName
            found.append(Membership(f"{namespace}/{pod_group_name}", Source.UPSTREAM, role))
    except ValueError as e:
        return Membership(role=role, error=f"invalid gang declaration: {e}")
    keys = {m.key for m in found}
    labelled = [m for m in found if m.source == Source.LABELS]
    if len(labelled) == 2 and len(keys) == 1 and labelled[0].implicit != labelled[1].implicit:
        return Membership(
            role=role,
            error=(
                f"invalid gang declaration: {lbl.POD_GROUP_MIN_LABEL} and "
                f"{lbl.SIGS_POD_GROUP_MIN_LABEL} disagree"
            ),
        )
    if len(keys) > 1:
        names = ", ".join(f"{m.key} ({m.source})" for m in found)
        return Membership(role=role, error=f"the pod declares more than one gang: {names}")
    if not found:
        return Membership(role=role)
    # Several conventions naming the same gang agree; the highest-precedence one wins.
    return found[0]


def _labelled(
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    name_label: str,
    min_label: str,
    role: str,
    created: float,
) -> Membership:
    key = f"{namespace}/{name}"
    raw = labels.get(min_label)
    if raw is None:
        raise ValueError(f"label {name_label} needs {min_label}")
    n = _positive_int(raw, min_label)
    return Membership(key, Source.LABELS, role, GangSpec(key, n, created=created))


def _unknown_keys(labels: Mapping[str, str], annotations: Mapping[str, str]) -> str:
    """Gang-looking keys gangsched does not read, named with what it reads instead; or ''."""
    problems: list[str] = []
    for where, keys, known, as_here, as_elsewhere in (
        ("label", labels, lbl.GANG_LABELS, "a label", "an annotation"),
        ("annotation", annotations, lbl.GANG_ANNOTATIONS, "an annotation", "a label"),
    ):
        for key in sorted(keys):
            if key in known or not key.startswith(lbl.GANG_KEY_PREFIXES):
                continue
            if key in lbl.GANG_LABELS | lbl.GANG_ANNOTATIONS:
                problems.append(f"{where} {key} is read as {as_elsewhere}, not as {as_here}")
                continue
            prefix = next(p for p in lbl.GANG_KEY_PREFIXES if key.startswith(p))
            same = sorted(k for k in known if k.startswith(prefix))
            reads = f" (it reads the {where}s {', '.join(same)})" if same else ""
            problems.append(f"{where} {key} is not one gangsched reads{reads}")
    return "; ".join(problems)


def _koordinator(
    namespace: str, name: str, ann: Mapping[str, str], role: str, created: float
) -> Membership:
    key = f"{namespace}/{name}"
    raw_min = ann.get(lbl.KOORD_MIN)
    if raw_min is None:
        raise ValueError(f"annotation {lbl.KOORD_NAME} needs {lbl.KOORD_MIN}")
    min_member = _positive_int(raw_min, lbl.KOORD_MIN)
    total = ann.get(lbl.KOORD_TOTAL)
    if total is not None and _positive_int(total, lbl.KOORD_TOTAL) < min_member:
        raise ValueError(f"{lbl.KOORD_MIN} {min_member} exceeds {lbl.KOORD_TOTAL} {total}")
    timeout = _duration(ann[lbl.KOORD_WAITING]) if lbl.KOORD_WAITING in ann else 600.0
    mode_raw = ann.get(lbl.KOORD_MODE, "Strict")
    modes = {"strict": GangMode.STRICT, "nonstrict": GangMode.NON_STRICT}
    if mode_raw.lower() not in modes:
        raise ValueError(f"{lbl.KOORD_MODE} must be Strict or NonStrict, got {mode_raw!r}")
    group: tuple[str, ...] = ()
    if raw := ann.get(lbl.KOORD_GROUPS):
        try:
            names = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"{lbl.KOORD_GROUPS} must be a JSON list of gang names") from None
        if not isinstance(names, list) or not all(isinstance(x, str) for x in names):
            raise ValueError(f"{lbl.KOORD_GROUPS} must be a JSON list of gang names")
        group = tuple(sorted({key, *(x if "/" in x else f"{namespace}/{x}" for x in names)}))
    spec = GangSpec(
        key,
        min_member,
        timeout_seconds=timeout,
        created=created,
        mode=modes[mode_raw.lower()],
        gang_group=group,
    )
    return Membership(key, Source.KOORDINATOR, role, spec)
