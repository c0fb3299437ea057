"""``gangsched run``'s start, in the order that gets it to its first decision soonest.

Loading the scheduler's modules takes about half a CPU-second, and listing a big cluster's
nodes and pods takes the API server about as long again. Neither needs the other until the
lists are handled, so the start makes its API client first (a few light modules), asks for
the first page of the node and pod lists (:meth:`KubeClient.prefetch`; not with leader
election, whose lists wait for the lease), and loads the rest of the scheduler on a worker
thread meanwhile; the reflectors then take those answers instead of asking again (the same
path and parameters: firstlists.py), if they ask within 2 s of the answers' arrival.
Everything else is built by the composition root, gangsched/app.py.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
from typing import TYPE_CHECKING

from gangsched.kube.io.client import KubeClient, load_configuration, user_agent
from gangsched.kube.io.firstlists import first_pages
from gangsched.kube.io.kubeconfig import ClusterConfig

if TYPE_CHECKING:
    from gangsched.settings import Settings

__all__ = ["instance_name", "run_scheduler", "scheduler_client"]

# connections opened while the scheduler is loaded (one TLS handshake each): about what its
# first lists and first gangs' bindings take at once
WARM_CONNECTIONS = 16


def instance_name() -> str:
    """This process: the host (the pod's name, in a cluster) and its process id."""
    return f"{socket.gethostname()}-{os.getpid()}"


def scheduler_client(settings: Settings, cfg: ClusterConfig) -> KubeClient:
    """The client the scheduler's watches, bindings and reports go through."""
    agent = user_agent(settings.identity or instance_name())
    return KubeClient(
        cfg, settings.api_qps, settings.api_burst, settings.max_in_flight, agent=agent
    )


async def run_scheduler(settings: Settings) -> None:
    cfg = await load_configuration(settings.kubeconfig, settings.context)
    client = scheduler_client(settings, cfg)
    # With leader election the lists wait for the lease, however long: asked for now, they
    # would be out of date by then (and a standby never needs them).
    if not settings.leader_elect:
        for path, params in first_pages():
            client.prefetch(path, **params)
    # the connections the first bindings and lists will take, opened meanwhile too
    warming = asyncio.ensure_future(client.warm(WARM_CONNECTIONS))
    warming.add_done_callback(lambda t: None if t.cancelled() else t.exception())
    try:
        app = await asyncio.to_thread(importlib.import_module, "gangsched.app")
    except BaseException:
        await client.close()
        raise
    await app.run_scheduler(settings, cfg=cfg, client=client)
