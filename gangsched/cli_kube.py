"""The cluster-facing subcommands: ``run`` and ``status-controller`` (``dev-cluster`` is one of
the dev tools: gangsched_dev)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["add_commands"]

# flag dest -> settings field, for flags that override the configuration file
_FLAG_FIELDS = (
    "scheduler_name",
    "kubeconfig",
    "context",
    "default_schedule_timeout_seconds",
    "schedule_timeout_override_seconds",
    "backoff_initial_seconds",
    "backoff_max_seconds",
    "api_qps",
    "api_burst",
    "log_format",
    "log_level",
    "http_bind_address",
    "identity",
    "lease_duration_seconds",
    "renew_deadline_seconds",
    "retry_period_seconds",
)


def _settings(args: argparse.Namespace) -> Any:
    from gangsched.settings import load_settings

    overrides = {f: getattr(args, f) for f in _FLAG_FIELDS if getattr(args, f, None) is not None}
    if getattr(args, "no_status_controller", False):
        overrides["status_controller"] = False
    if getattr(args, "leader_elect", False):
        overrides["leader_elect"] = True
    return load_settings(args.config, overrides)


def _run_async(main: Any, prog: str) -> int:
    from gangsched.logging import stop_message

    async def runner() -> None:
        task = asyncio.ensure_future(main)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task

    try:
        asyncio.run(runner())
    except (OSError, *kube_config_errors()) as e:  # type: ignore[misc]
        stop_message(prog, f"cannot connect: {e}")
        return 2
    except fatal_stops() as e:
        # An orderly stop for a reason the process cannot recover from (the leader lease was
        # lost, the PodGroup controller stopped): the app has logged it and flushed its writes;
        # exit non-zero so the kubelet restarts the container.
        stop_message(prog, str(e))
        return 1
    return 0


def fatal_stops() -> tuple[type[Exception], ...]:
    from gangsched.app import ControllerStoppedError, LostLeadershipError

    return (LostLeadershipError, ControllerStoppedError)


def kube_config_errors() -> tuple[type[Exception], ...]:
    from kubernetes_asyncio.config import ConfigException

    from gangsched.kube.io.kubeconfig import KubeconfigError

    return (KubeconfigError, ConfigException)


def _daemon(args: argparse.Namespace, prog: str, main: Callable[[Any], Awaitable[None]]) -> int:
    """Load the settings (exit 2 naming the bad field), set up logging, run ``main``."""
    from gangsched.logging import configure_logging
    from gangsched.settings import ConfigError

    try:
        settings = _settings(args)
    except ConfigError as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
    configure_logging(settings.log_format, settings.log_level)
    return _run_async(main(settings), prog)


def _run(args: argparse.Namespace) -> int:
    from gangsched.boot import run_scheduler

    return _daemon(args, "gangsched run", run_scheduler)


def _status(args: argparse.Namespace) -> int:
    from gangsched.app import run_status_controller

    return _daemon(args, "gangsched status-controller", run_status_controller)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="configuration file (YAML); see docs/configuration.md")
    p.add_argument("--kubeconfig", help="kubeconfig path (default: $KUBECONFIG, in-cluster)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--scheduler-name", dest="scheduler_name")
    p.add_argument("--log-format", dest="log_format", choices=["json", "console"])
    p.add_argument("--log-level", dest="log_level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--api-qps", dest="api_qps", type=float)
    p.add_argument("--api-burst", dest="api_burst", type=int)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = sub.add_parser("run", help="run the scheduler against a cluster")
    _common(r)
    r.add_argument(
        "--default-schedule-timeout", dest="default_schedule_timeout_seconds", type=float
    )
    r.add_argument(
        "--schedule-timeout-override", dest="schedule_timeout_override_seconds", type=float
    )
    r.add_argument("--backoff-initial", dest="backoff_initial_seconds", type=float)
    r.add_argument("--backoff-max", dest="backoff_max_seconds", type=float)
    r.add_argument("--leader-elect", action="store_true", help="elect a leader on a Lease")
    r.add_argument("--identity", help="this replica's name in the lease (default: host-pid)")
    r.add_argument("--lease-duration", dest="lease_duration_seconds", type=float)
    r.add_argument("--renew-deadline", dest="renew_deadline_seconds", type=float)
    r.add_argument("--retry-period", dest="retry_period_seconds", type=float)
    r.add_argument(
        "--http-bind-address",
        dest="http_bind_address",
        help="host:port for /metrics, /healthz and /readyz ('' disables)",
    )
    r.add_argument(
        "--no-status-controller",
        action="store_true",
        help="do not run the PodGroup controller (the Accepted condition) in this process",
    )
    r.set_defaults(func=_run)

    s = sub.add_parser(
        "status-controller",
        help="run only the PodGroup controller: it checks each PodGroup's spec and writes "
        "its Accepted condition (phase and counts are the scheduler's)",
    )
    _common(s)
    s.set_defaults(func=_status)
