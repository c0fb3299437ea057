"""Every label and annotation gangsched reads or writes."""

from __future__ import annotations

GROUP = "gangsched.io"
VERSION = "v1alpha1"
PODGROUP_PLURAL = "podgroups"

POD_GROUP_LABEL = "gangsched.io/pod-group"
ROLE_LABEL = "gangsched.io/role"
TIMEOUT_ANNOTATION = "gangsched.io/timeout"
# On a PodGroup of another convention (scheduler-plugins, Volcano): what gangsched's own
# PodGroup says in spec.preemptionPolicy and spec.expectedRuntimeSeconds.
PREEMPTION_POLICY_ANNOTATION = "gangsched.io/preemption-policy"
EXPECTED_RUNTIME_ANNOTATION = "gangsched.io/expected-runtime-seconds"
# ... and spec.onMemberLoss (None or RestartGang).
ON_MEMBER_LOSS_ANNOTATION = "gangsched.io/on-member-loss"
# The pod condition the scheduler writes on a gang's pending pods when deciding the gang failed
# inside it (api/schedulererror.py)
SCHEDULER_ERROR_CONDITION = "gangsched.io/SchedulerError"

# scheduler-plugins Coscheduling
XK8S_GROUP = "scheduling.x-k8s.io"
XK8S_VERSION = "v1alpha1"
XK8S_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"

# Volcano / kube-batch, and annotation-only gangs (group-name + group-pod-num)
VOLCANO_GROUP = "scheduling.volcano.sh"
VOLCANO_VERSION = "v1beta1"
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
GROUP_POD_NUM_ANNOTATION = "scheduling.k8s.io/group-pod-num"
VOLCANO_TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"

# scheduler-plugins' original Coscheduling proposal, and the same labels as released
# scheduler-plugins versions spell them
POD_GROUP_NAME_LABEL = "pod-group/name"
POD_GROUP_MIN_LABEL = "pod-group/min-available"
SIGS_POD_GROUP_NAME_LABEL = "pod-group.scheduling.sigs.k8s.io/name"
SIGS_POD_GROUP_MIN_LABEL = "pod-group.scheduling.sigs.k8s.io/min-available"

# Koordinator
KOORD = "gang.scheduling.koordinator.sh"
KOORD_NAME = f"{KOORD}/name"
KOORD_MIN = f"{KOORD}/min-available"
KOORD_WAITING = f"{KOORD}/waiting-time"
KOORD_TOTAL = f"{KOORD}/total-number"
KOORD_MODE = f"{KOORD}/mode"
KOORD_GROUPS = f"{KOORD}/groups"
KOORD_TIMEOUT = f"{KOORD}/timeout"

FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"

# Keys under these prefixes declare gangs. A pod carrying one gangsched does not read (a typo,
# a label put where an annotation belongs, a feature of another scheduler) is refused rather
# than scheduled as a plain pod.
GANG_KEY_PREFIXES = (
    "gangsched.io/",
    "scheduling.x-k8s.io/",
    "scheduling.k8s.io/",
    "pod-group/",
    "pod-group.scheduling.sigs.k8s.io/",
    f"{KOORD}/",
)
GANG_LABELS = frozenset(
    {
        POD_GROUP_LABEL,
        ROLE_LABEL,
        XK8S_POD_GROUP_LABEL,
        POD_GROUP_NAME_LABEL,
        POD_GROUP_MIN_LABEL,
        SIGS_POD_GROUP_NAME_LABEL,
        SIGS_POD_GROUP_MIN_LABEL,
    }
)
GANG_ANNOTATIONS = frozenset(
    {
        GROUP_NAME_ANNOTATION,
        GROUP_POD_NUM_ANNOTATION,
        TIMEOUT_ANNOTATION,
        KOORD_NAME,
        KOORD_MIN,
        KOORD_WAITING,
        KOORD_TOTAL,
        KOORD_MODE,
        KOORD_GROUPS,
        KOORD_TIMEOUT,
    }
)
