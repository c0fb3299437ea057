"""Topology in the simulator: synthesised racks, gangs' ``topologyPlacement``, the split-gang
figures, ``--gang-topology`` side by side, and the bench's ``--topology``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangsched.cli import main
from gangsched.core.model import DomainConstraint, Node
from gangsched.sim.jobs import build_jobs, build_nodes
from gangsched.sim.run import core_config_from, settings_of, simulate
from gangsched.sim.topology import HOSTNAME, Racks, synthesise
from gangsched.sim.workload import WorkloadError, load_workload
from gangsched_dev.bench import bench, parse_topology

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "topology.yaml"
RACK = "example.com/rack"
BLOCK = "example.com/block"
TOPOLOGY = (
    "nodeTopology: {rackSize: 2, racksPerBlock: 2, "
    "labels: {block: example.com/block, rack: example.com/rack}}\n"
)


def _write(tmp_path: Path, text: str) -> Path:
    w = tmp_path / "w.yaml"
    w.write_text(text)
    return w


def _gang(name: str, count: int, gpus: int, extra: str = "", arrival: float = 0) -> str:
    return (
        f"  - {{name: {name}, arrival: {arrival}, duration: 100{extra}, "
        f"pods: [{{count: {count}, cpu: '1', memory: 1Gi, gpus: {gpus}}}]}}\n"
    )


# ---- the workload format -------------------------------------------------------------------


def test_topology_placement_maps_to_the_gangs_domain_constraint(tmp_path: Path) -> None:
    w, base = load_workload(
        _write(
            tmp_path,
            "nodes: [{name: n, gpus: 8}]\n"
            "gangs:\n"
            + _gang("req", 2, 1, ", topologyPlacement: {required: example.com/rack}")
            + _gang("pref", 2, 1, ", topologyPlacement: {preferred: example.com/rack}")
            + _gang(
                "sized",
                4,
                1,
                ", topologyPlacement: {required: example.com/block, "
                "slices: {size: 2, required: example.com/rack}}",
            )
            + "  - {name: labelled, topologyPlacement: {slices: {podLabel: job, required: "
            "example.com/rack}}, pods: [{count: 2, labels: {job: a}}, {count: 2, labels: "
            "{job: b}}]}\n" + _gang("plain", 1, 1),
        )
    )
    jobs = {j.key.split("/")[1]: j for j in build_jobs(w, base)}
    domain = {name: j.spec.domain for name, j in jobs.items() if j.spec is not None}
    assert domain["req"] == DomainConstraint(required=RACK)
    assert domain["pref"] == DomainConstraint(preferred=RACK)
    assert domain["sized"] == DomainConstraint(required=BLOCK, slice_required=RACK, slice_size=2)
    assert domain["labelled"] == DomainConstraint(slice_required=RACK, slice_label="job")
    assert domain["plain"] == DomainConstraint()
    labelled = jobs["labelled"].pods
    assert [p.labels.get("job") for p in labelled] == ["a", "a", "b", "b"]
    assert [p.index for p in jobs["sized"].pods] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("placement", "field", "message"),
    [
        (
            "{required: example.com/rack, preferred: example.com/block}",
            "gangs.0.topologyPlacement",
            "at most one of required and preferred",
        ),
        ("{required: 'not a key!'}", "gangs.0.topologyPlacement.required", "not a valid label"),
        (
            "{slices: {podLabel: job, size: 2, required: example.com/rack}}",
            "gangs.0.topologyPlacement.slices",
            "exactly one of podLabel and size",
        ),
        (
            "{slices: {size: 2}}",
            "gangs.0.topologyPlacement.slices.required",
            "Field required",
        ),
        (
            "{slices: {size: 0, required: example.com/rack}}",
            "gangs.0.topologyPlacement.slices.size",
            "greater than or equal to 1",
        ),
        ("{rack: example.com/rack}", "gangs.0.topologyPlacement.rack", "Extra inputs"),
    ],
)
def test_bad_topology_placement_is_refused_naming_the_field(
    tmp_path: Path, placement: str, field: str, message: str
) -> None:
    w = _write(
        tmp_path,
        f"gangs: [{{name: g, topologyPlacement: {placement}, pods: [{{count: 1}}]}}]\n",
    )
    with pytest.raises(WorkloadError) as e:
        load_workload(w)
    assert f"{field}: " in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(
    ("topology", "field", "message"),
    [
        ("{rackSize: 0, labels: {rack: r}}", "nodeTopology.rackSize", "greater than or equal"),
        ("{rackSize: 2}", "nodeTopology.labels", "Field required"),
        (
            "{rackSize: 2, racksPerBlock: 2, labels: {rack: r}}",
            "nodeTopology",
            "racksPerBlock and labels.block go together",
        ),
        ("{rackSize: 2, labels: {rack: 'a b'}}", "nodeTopology.labels.rack", "not a valid"),
    ],
)
def test_bad_node_topology_is_refused_naming_the_field(
    tmp_path: Path, topology: str, field: str, message: str
) -> None:
    w = _write(tmp_path, f"nodeTopology: {topology}\nnodes: [{{name: n}}]\n")
    with pytest.raises(WorkloadError) as e:
        load_workload(w)
    assert f"{field}: " in str(e.value) and message in str(e.value)


# ---- synthesised racks ---------------------------------------------------------------------


def test_racks_and_blocks_are_synthesised_in_inventory_order(tmp_path: Path) -> None:
    w, base = load_workload(
        _write(
            tmp_path,
            TOPOLOGY + "nodes:\n  - {name: a, count: 3}\n"
            "  - {name: b, count: 3, labels: {example.com/rack: own}}\n",
        )
    )
    nodes = build_nodes(w, base)
    got = [(n.name, n.labels.get(BLOCK), n.labels.get(RACK), n.labels[HOSTNAME]) for n in nodes]
    assert got == [
        ("a-0", "block-000", "rack-0000", "a-0"),
        ("a-1", "block-000", "rack-0000", "a-1"),
        ("a-2", "block-000", "rack-0001", "a-2"),
        ("b-0", "block-000", "own", "b-0"),  # a label the node sets wins
        ("b-1", "block-001", "own", "b-1"),
        ("b-2", "block-001", "own", "b-2"),
    ]
    # the levels default to the synthesised ones, largest first; the settings' own win
    assert core_config_from(settings_of(w)).topology_levels == (BLOCK, RACK, HOSTNAME)
    w2 = w.model_copy(update={"settings": {"topologyLevels": [RACK]}})
    assert core_config_from(settings_of(w2)).topology_levels == (RACK,)


def test_trace_inventories_get_racks_too(tmp_path: Path) -> None:
    w, base = load_workload(
        _write(
            tmp_path,
            "nodeTopology: {rackSize: 4, labels: {rack: example.com/rack}}\n"
            f"nodes: [{{trace: {DATA / 'openb_nodes_sample.csv'}}}]\n",
        )
    )
    nodes = build_nodes(w, base)
    assert len(nodes) > 4
    assert [n.labels[RACK] for n in nodes[:5]] == ["rack-0000"] * 4 + ["rack-0001"]
    assert all(BLOCK not in n.labels for n in nodes)
    assert Racks(4, RACK).levels == (RACK, HOSTNAME)


def test_synthesise_leaves_a_fully_labelled_node_as_it_is() -> None:
    racks = Racks(1, RACK)
    once = synthesise(synthesise([*_nodes(1)], racks), racks)
    assert synthesise(once, racks)[0] is once[0]


def _nodes(n: int) -> list[Node]:
    alloc = {"cpu": 128_000, "memory": 2**40, "pods": 110, "nvidia.com/gpu": 8}
    return [Node(f"n{i}", dict(alloc)) for i in range(n)]


# ---- the split-gang figures -----------------------------------------------------------------


def test_split_gangs_per_level_on_a_tiny_cluster(tmp_path: Path) -> None:
    # 4 nodes of 8 GPUs in racks of 2: a gang of 3 whole nodes must span two racks
    w = _write(
        tmp_path,
        TOPOLOGY
        + "nodes: [{name: n, count: 4, gpus: 8}]\ngangs:\n"
        + _gang("wide", 3, 8)
        + _gang("one", 1, 8),
    )
    code, text, _ = simulate(str(w), as_json=True, plot_path=None, show_all=False, until=None)
    s = json.loads(text)
    assert code == 0 and s["gangs_bound"] == 2
    assert s["split_gangs"] == {
        BLOCK: {"gangs": 2, "split": 0, "share": 0.0},
        RACK: {"gangs": 2, "split": 1, "share": 0.5},
        HOSTNAME: {"gangs": 2, "split": 1, "share": 0.5},
    }
    assert s["wait_by_topology"]["none"]["jobs"] == 2
    assert s["wait_by_topology"]["all"]["started"] == 2
    # and in the text report
    _, text, _ = simulate(str(w), as_json=False, plot_path=None, show_all=False, until=None)
    assert "split_gangs.example.com/rack" in text and "split=1 share=0.5" in text


def test_no_topology_no_figures(tmp_path: Path) -> None:
    w = _write(tmp_path, "nodes: [{name: n, gpus: 8}]\ngangs:\n" + _gang("g", 2, 1))
    _, text, _ = simulate(str(w), as_json=True, plot_path=None, show_all=False, until=None)
    s = json.loads(text)
    assert "split_gangs" not in s and "wait_by_topology" not in s


def test_required_rack_gangs_never_split_and_wait_instead(tmp_path: Path) -> None:
    # 8 nodes of 8 GPUs, racks of 2 (16 GPUs), under a stream of 1-GPU jobs; gangs of 8 to 16
    # GPUs that would straddle racks if they could, and one that fits no rack
    gangs = "".join(
        _gang(f"g{i}", count, gpus, ", topologyPlacement: {required: example.com/rack}", i * 7)
        for i, (count, gpus) in enumerate([(2, 4), (4, 4), (3, 4), (2, 8), (4, 2), (1, 8)] * 4)
    )
    too_big = _gang("huge", 3, 8, ", topologyPlacement: {required: example.com/rack}")
    w = _write(
        tmp_path,
        TOPOLOGY + "nodes: [{name: n, count: 8, gpus: 8}]\n"
        "pods: [{name: s, every: 3, repeat: 60, duration: 50, gpus: 1}]\n"
        "settings: {defaultScheduleTimeoutSeconds: 30}\n"
        "gangs:\n" + gangs + too_big,
    )
    code, text, result = simulate(str(w), as_json=True, plot_path=None, show_all=False, until=None)
    s = json.loads(text)
    assert code == 0 and s["partial_gangs"] == 0 and s["overcommitted_nodes"] == 0
    assert s["gangs_bound"] == 24
    assert s["split_gangs"][RACK] == {"gangs": 24, "split": 0, "share": 0.0}
    assert s["wait_by_topology"]["required"]["still_waiting"] == 1
    # checked from the placements themselves too
    for j in result.jobs:
        if j.spec is None or j.first_started is None:
            continue
        racks = {result.node_labels[result.placements[u]][RACK] for u in j.bound_pods}
        assert len(racks) == 1, j.key
    huge = next(j for j in result.jobs if j.key == "default/huge")
    assert huge.first_started is None and RACK in huge.message


# ---- --gang-topology and the example ---------------------------------------------------------


def test_the_example_shows_the_trade_off(capsys: pytest.CaptureFixture[str]) -> None:
    variants = f"none,preferred={RACK},required={RACK}"
    code = main(["simulate", str(EXAMPLE), "--gang-topology", variants, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    cols = json.loads(out)["profiles"]
    assert list(cols) == ["none", f"preferred={RACK}", f"required={RACK}"]
    split = [cols[c][f"split_gangs.{RACK}.split"]["mean"] for c in cols]
    assert split[0] > split[1] > split[2] == 0
    wait = [cols[c]["wait_by_topology.all.wait_mean"]["mean"] for c in cols]
    assert wait[2] > wait[0]
    assert all(cols[c]["gangs_failed"]["max"] == 0 for c in cols)
    assert all(cols[c]["partial_gangs"]["max"] == 0 for c in cols)


@pytest.mark.parametrize("variant", ["sometimes=example.com/rack", "required=", "required=a b"])
def test_a_bad_gang_topology_variant_is_refused(
    variant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(EXAMPLE), "--gang-topology", variant]) == 2
    assert "--gang-topology" in capsys.readouterr().err


# ---- the bench -------------------------------------------------------------------------------


def test_parse_topology() -> None:
    assert parse_topology("block=8,rack=20") == Racks(20, RACK, 8, BLOCK)
    assert parse_topology("rack=4").levels == (RACK, HOSTNAME)
    for bad in ("block=8", "rack=0", "rack=x", "row=2,rack=2", "rack=2,rack=3"):
        with pytest.raises(ValueError, match="--topology"):
            parse_topology(bad)


def test_bench_required_rack_keeps_every_gang_in_one_rack(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["bench", "--nodes", "60", "--pods", "200", "--gang-size", "8", "--gpus-per-pod", "4"]
    assert main([*args, "--topology", "block=2,rack=5", "--gang-topology", "required-rack",
                 "--json"]) == 0  # fmt: skip
    got = json.loads(capsys.readouterr().out)
    assert got["gangs_split_racks"] == 0 and got["gangs_bound"] == 12  # one gang of 4 nodes a rack
    assert got["command"].endswith("--topology block=2,rack=5 --gang-topology required-rack --json")
    # without the constraint, gangs of 4 nodes in racks of 5 straddle racks
    assert main([*args, "--topology", "block=2,rack=5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["gangs_split_racks"] > 0
    # a gang topology needs the levels
    assert main([*args, "--gang-topology", "required-rack"]) == 2
    assert "--topology" in capsys.readouterr().err


def test_bench_function_reports_the_levels() -> None:
    nodes = synthesise(_nodes(4), Racks(2, RACK))
    # 4 gangs of 2 whole nodes on 4 nodes in racks of 2: two fit, one a rack
    got = bench(nodes, 8, 2, 8, levels=Racks(2, RACK).levels, gang_topology="required-rack")
    assert got["gangs_bound"] == 2 and got["gangs_split_racks"] == 0
    assert got["topology_levels"] == f"{RACK},{HOSTNAME}"
