"""The simulator carries out the gang lifecycle's decisions: a member that fails in a running
gang under onMemberLoss: RestartGang has the rest of the gang deleted and the whole gang made
and placed again; under the default None only the replacement is placed."""

from __future__ import annotations

import json
from pathlib import Path

from gangsched.sim.run import simulate

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "restart-gang.yaml"


def test_restart_gang_restarts_the_whole_gang_and_none_keeps_the_rest_running() -> None:
    code, text, result = simulate(
        str(EXAMPLE), as_json=True, plot_path=None, show_all=False, until=None
    )
    assert code == 0, text
    report = json.loads(text)
    assert report["member_failures"] == 2
    assert report["member_losses"] == 2
    assert report["pods_restarted"] == 3  # the three RestartGang workers left
    assert report["partial_gangs"] == 0 and report["overcommitted_nodes"] == 0
    # 8 first placements, 4 again for the restarted gang, 1 replacement for the other
    assert report["pods_bound"] == 13
    assert report["gangs_bound"] == 2
    jobs = {j.key: j for j in result.jobs}
    restarted, kept = jobs["default/restart"], jobs["default/keep"]
    assert restarted.evictions == 1 and len(restarted.waits) == 2  # stopped, then ran again
    assert kept.evictions == 1 and len(kept.waits) == 2  # below quorum until replaced
