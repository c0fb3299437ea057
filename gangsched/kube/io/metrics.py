"""Prometheus metrics. The core stays free of them: the service measures around the core's
calls and counts its decisions.

One naming rule: a metric that means what a kube-scheduler v1.36 metric means carries that
metric's name (``scheduler_podgroup_schedule_attempts_total`` and
``scheduler_podgroup_scheduling_attempt_duration_seconds``, kube-scheduler's pod group metrics,
observed at the same point: the end of one gang cycle, before the bindings); every other metric
is gangsched's own and starts with ``gangsched_``. kube-scheduler's ``scheduler_pending_pods``
counts pods, ``gangsched_pending_podgroups`` counts gangs, so it keeps its own prefix."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["KUBE_SCHEDULER_NAMES", "OWN_PREFIX", "Metrics"]

# The metrics named after kube-scheduler v1.36's (pkg/scheduler/metrics/metrics.go).
KUBE_SCHEDULER_NAMES = frozenset(
    {
        "scheduler_podgroup_schedule_attempts_total",
        "scheduler_podgroup_scheduling_attempt_duration_seconds",
    }
)
OWN_PREFIX = "gangsched_"

_LATENCY = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_E2E = (0.01, 0.05, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.attempts = Counter(
            "scheduler_podgroup_schedule_attempts_total",
            "Gang scheduling attempts, by result.",
            ["result"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Time spent in one gang scheduling cycle, by result.",
            ["result"],
            buckets=_LATENCY,
            registry=r,
        )
        self.e2e_duration = Histogram(
            "gangsched_podgroup_e2e_scheduling_duration_seconds",
            "From a gang's first attempt to its bind decision.",
            buckets=_E2E,
            registry=r,
        )
        self.pending_gangs = Gauge(
            "gangsched_pending_podgroups",
            "Gangs waiting to be scheduled, by queue.",
            ["queue"],
            registry=r,
        )
        self.permit_waiting = Gauge(
            "gangsched_podgroup_permit_waiting",
            "Gangs holding reservations at Permit.",
            registry=r,
        )
        self.permit_timeouts = Counter(
            "gangsched_podgroup_permit_timeouts_total",
            "Gangs whose Permit deadline passed; everything they held was released.",
            registry=r,
        )
        self.bindings = Counter(
            "gangsched_bindings_total", "Pod bindings, by result.", ["result"], registry=r
        )
        self.preemptions = Counter(
            "gangsched_preemptions_total",
            "Preemptions decided: a gang that fits once lower-priority victims are gone.",
            registry=r,
        )
        self.preemption_victims = Counter(
            "gangsched_preemption_victims_total",
            "Victim pods of preemptions, by result (evicted, gone, replaced, failed).",
            ["result"],
            registry=r,
        )
        self.evictions_resumed = Counter(
            "gangsched_evictions_resumed_total",
            "Victim pods of evictions decided earlier (by a process that crashed or lost its "
            "lease after marking them, or whose delete failed) and carried out later.",
            registry=r,
        )
        self.device_conflicts = Counter(
            "gangsched_gpu_device_conflicts_total",
            "Running pods whose recorded GPU devices (or what the records leave for a pod "
            "without one) over-commit a device; each also gets a GPUDeviceConflict event.",
            registry=r,
        )
        self.gpus = Gauge(
            "gangsched_gpus",
            "GPU devices in ready nodes, total and allocated (bound or reserved); a share of "
            "a GPU counts its fraction.",
            ["state"],
            registry=r,
        )
        self.leader = Gauge(
            "gangsched_leader", "1 while this replica holds the leader lease.", registry=r
        )
        self.forecasts = Gauge(
            "gangsched_start_forecasts",
            "Waiting gangs by whether the last start forecast gave a time (known) or not "
            "(unknown: a gang or pod it waits for declared no end).",
            ["result"],
            registry=r,
        )
        self.forecast_seconds = Gauge(
            "gangsched_start_forecast_seconds",
            "How long the last round of start forecasts took.",
            registry=r,
        )
        self.relists = Counter(
            "gangsched_watch_relists_total",
            "Full lists after a watch expired.",
            ["resource"],
            registry=r,
        )
        self.internal_errors = Counter(
            "gangsched_internal_errors_total",
            "Errors inside gangsched in work it carries on after (a round of start forecasts, "
            "a status resync, an object a watch delivered); each is logged with its traceback.",
            ["work"],
            registry=r,
        )
        self.writes_dropped = Counter(
            "gangsched_api_writes_dropped_total",
            "Events or status writes dropped because the API server could not keep up.",
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
