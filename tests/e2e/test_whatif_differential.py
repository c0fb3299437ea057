"""What-if, differentially: generated gangs, one after another, each first asked about (what-if,
from the live cluster, with the scheduler's own core and settings) and then submitted to the
running scheduler. The verdict must be what the scheduler then does: whether the gang binds,
and on which nodes each of its members goes.

On a control plane of this test's own, so that no other test's pods or schedulers change the
cluster between the question and the answer. The gangs stay once placed (kwok runs them), so
the cluster fills up and later gangs do not fit: they wait, and the gangs waiting are placed
first by what-if too, as the scheduler would. Every fifth question follows the end of a
running gang (its pods deleted), once the scheduler has placed what that let in. A quarter of
the gangs are of a higher priority class: where they do not fit, what-if names the pods they
would evict, and those are the pods the scheduler then evicts (with those that a gang waiting
ahead of it evicts first, which what-if names too). The cluster does not change between a
verdict and the submission, so every case must agree.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from gangsched.kube.io.client import KubeClient, load_configuration
from gangsched.kube.whatif import Verdict, what_if
from gangsched.settings import Settings
from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess, own_control_plane
from .kube import bound, create, pod, podgroup, pods, refused, wait_for

NS = "what-if"
SEED = 20261127
GANGS = 60
SETTLE = 4.0  # seconds: longer than the scheduler's longest backoff here (2 s)


def _verdict(cp: ControlPlane, objs: list[dict[str, Any]]) -> Verdict:
    async def ask() -> Verdict:
        client = KubeClient(await load_configuration(str(cp.kubeconfig)))
        try:
            return await what_if(client, Settings.model_validate({}), objs, NS)
        finally:
            await client.close()

    return asyncio.run(ask())


def _outcome(cp: ControlPlane, names: list[str]) -> dict[str, str] | None:
    """pod -> node once every member is bound; {} once every member was refused; None while
    the scheduler has not decided."""
    placed = bound(cp, NS)
    if all(n in placed for n in names):
        return {n: placed[n] for n in names}
    if not any(n in placed for n in names) and refused(cp, NS, names):
        return {}
    return None


def test_what_if_agrees_with_what_the_scheduler_then_does(tmp_path: Path) -> None:
    rnd = random.Random(SEED)
    with own_control_plane() as cp:
        cp.create_namespace(NS)
        for cls, value in (("wi-low", 0), ("wi-high", 1000)):
            create(
                cp,
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": cls},
                    "value": value,
                },
            )
        for i in range(8):
            cp.add_fake_node(f"w{i}", str(rnd.choice((8, 16, 32))), "64Gi", rnd.choice((2, 4, 8)))
        proc = SchedulerProcess(cp, tmp_path / "s.log").start()
        try:
            agreed, cases = 0, []
            running: list[list[str]] = []
            for g in range(GANGS):
                if g % 5 == 4:
                    # (a gang evicted while the scheduler settled after the last end is gone
                    # already: a gang waiting ahead may preempt when the room it frees lets it)
                    present = set(pods(cp, NS))
                    running = [r for r in ([m for m in r if m in present] for r in running) if r]
                if g % 5 == 4 and running:
                    # A gang ends: its room goes to the gangs waiting (the scheduler places
                    # them, in queue order, once their backoff is over), then the next
                    # question is asked on the cluster as it settled.
                    ended = running.pop(rnd.randrange(len(running)))
                    for member in ended:
                        cp.kubectl("delete", "pod", member, "-n", NS, "--grace-period=0")
                    time.sleep(SETTLE)
                size, gpus = rnd.randint(1, 3), rnd.choice((1, 2, 2, 4))
                name = f"g{g}"
                high = rnd.random() < 0.25  # may evict gangs of the low class
                members = [
                    pod(f"{name}-{i}", NS, group=name, gpus=gpus, cpu=str(rnd.randint(1, 4)))
                    for i in range(size)
                ]
                for m in members:
                    m["spec"]["priorityClassName"] = "wi-high" if high else "wi-low"
                    m["spec"]["terminationGracePeriodSeconds"] = 0
                objs = [podgroup(name, NS, size), *members]
                verdict = _verdict(cp, objs)
                before = set(pods(cp, NS))
                for obj in objs:
                    create(cp, obj)
                names = [m["metadata"]["name"] for m in members]
                outcome = wait_for(
                    f"the scheduler's decision on {name}",
                    lambda names=names: (o := _outcome(cp, names)) is not None and (o,),
                    timeout=60,
                )[0]
                gone = sorted(f"{NS}/{n}" for n in before - set(pods(cp, NS)))
                for victims in gone:
                    for r in running:
                        if victims.split("/")[1] in r:
                            r.remove(victims.split("/")[1])
                running = [r for r in running if r]
                if outcome:
                    running.append(names)
                said: dict[str, str] = {}
                for node, placed in verdict.nodes.items():
                    for p in placed:
                        said[p] = node
                fits = verdict.fits or bool(verdict.victims)
                # the pods it evicts, and those evicted first for gangs ahead of it
                evicts = sorted(
                    {v for v, _ in verdict.victims} | {v for v, *_ in verdict.ahead_victims}
                )
                same = fits == bool(outcome) and (not outcome or said == outcome)
                same = same and evicts == gone
                agreed += same
                cases.append((name, fits, said, outcome, evicts, gone, verdict.reason))
        finally:
            proc.stop()
        wrong = [
            c
            for c in cases
            if not (c[1] == bool(c[3]) and (not c[3] or c[2] == c[3]) and c[4] == c[5])
        ]
        by: defaultdict[str, int] = defaultdict(int)
        for c in cases:
            by["preempts" if c[5] else "fits" if c[3] else "waits"] += 1
        print(f"{agreed} of {GANGS} verdicts agree ({dict(by)}); disagreements: {wrong}")
        assert by["fits"] and by["waits"] and by["preempts"], "every outcome is exercised"
        assert agreed == GANGS, wrong
