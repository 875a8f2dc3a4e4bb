"""The doctor and the tuner on one job across two "nodes" on this machine: two torchrun agents (--nnodes 2, a c10d
rendezvous on localhost, gloo; tests/data/two_nodes.py is the whole multi-node command, as `srun` is on a
cluster), every rank writing into the one --out. The runs are marked multinode (about a minute on 2 cores)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_doctor import table_rows

from ccoverlap.doctor import record
from ccoverlap.doctor.config import DoctorConfig

DATA = Path(__file__).parent / "data"
TWO_NODES = [sys.executable, str(DATA / "two_nodes.py")]
TRAIN = str(DATA / "doctor_train.py")


def ccoverlap(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccoverlap", *args], capture_output=True, text=True,
                          env=os.environ | (env or {}), timeout=300)


@pytest.mark.multinode
def test_the_doctor_reports_every_rank_of_every_node(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out"
    run = ccoverlap("doctor", "--steps", "2", "--skip", "2", "--out", str(out), "--json", str(tmp_path / "d.json"),
                    "--", *TWO_NODES, "--nproc-per-node", "2", TRAIN, "--steps", "6")
    assert run.returncode == 0, run.stderr[-3000:]
    records, bad = record.read_all(out)
    assert bad == [] and [r.rank for r in records] == [0, 1, 2, 3]
    host = socket.gethostname()
    assert record.nodes(records) == {f"{host} node 0": [0, 1], f"{host} node 1": [2, 3]}
    assert {(r.header["world_size"], r.header["rank_from"]) for r in records} == {(4, "torch.distributed")}
    assert [r.header["local_rank"] for r in records] == [0, 1, 0, 1] and all(r.complete for r in records)
    assert sorted(p.name for p in out.glob("*_trace.json.gz")) == [f"rank{r}_trace.json.gz" for r in range(4)]
    assert (f"step times of rank(s) 0, 1, 2, 3 on 2 nodes ({host} node 0: ranks 0, 1; {host} node 1: ranks 2, 3)"
            in run.stdout)
    rows = [row for row in table_rows(run.stdout) if "steps 3-4" in row]
    assert [row[:2] for row in rows] == [["0", f"{host} node 0"], ["1", f"{host} node 0"], ["2", f"{host} node 1"],
                                         ["3", f"{host} node 1"]]
    doc = json.loads((tmp_path / "d.json").read_text())
    assert [(s["rank"], s["node"]) for s in doc["step_times"]] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert doc["failures"] == []


def test_ranks_that_left_nothing_in_out_are_named(tmp_path, capsys):
    """Two ranks of four wrote here; the others' node has its own --out (no shared file system)."""
    from ccoverlap.doctor.session import diagnose

    out = tmp_path / "out"
    for rank in (0, 1):
        log = record.Log(out, rank, record.Identity(rank, 4, rank, 0, "node-a", "slurm").header()
                         | {"skip": 1, "steps": 1})
        log.write({"step": 1, "ms": None, "gpu_ms": None, "profiled": False, "warmup": False})
    failures = diagnose(out, DoctorConfig(out=str(out), skip=1, steps=1), ["srun", "python", "train.py"], 0)
    assert any(f.startswith(f"ranks 2, 3 of 4 left no step record in {out} (records came from node-a)") and
               "shared file system" in f for f in failures)
    from ccoverlap.tune.trial import steps_of

    samples, _, why = steps_of(record.read_all(out)[0], 0, 1)
    assert samples == () and why.startswith("rank(s) 2, 3 of 4 left no step record")


@pytest.mark.parametrize(("environ", "dist", "expected"), [
    ({"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "GROUP_RANK": "2"}, None, (5, 8, 1, 2, "torchrun")),
    ({"SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NODEID": "4"}, None,
     (9, 16, 1, 4, "slurm")),
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, None,
     (3, 4, 1, None, "open mpi")),
    # torchrun under srun: torchrun's own numbering of its workers wins over SLURM's of its agents
    ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1", "SLURM_PROCID": "1", "SLURM_NTASKS": "2"},
     None, (3, 4, 1, 1, "torchrun")),
    ({"RANK": "x", "WORLD_SIZE": "4", "SLURM_PROCID": "2", "SLURM_NTASKS": "4"}, None, (2, 4, None, None, "slurm")),
    ({"RANK": "7", "WORLD_SIZE": "4"}, None, (0, 1, None, None, "none")),  # out of range: not a rank
    ({}, None, (0, 1, None, None, "none")),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "GROUP_RANK": "0"}, (1, 2), (1, 2, 1, 0, "torch.distributed")),
    ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, (0, 1), (0, 1, None, None, "torch.distributed")),
])
def test_a_rank_is_known_by_its_jobs_own_variables(environ, dist, expected):
    me = record.identity(environ, dist)
    assert (me.rank, me.world, me.local_rank, me.node, me.source) == expected and me.host == socket.gethostname()


@pytest.mark.multinode
def test_the_tuner_keeps_a_knob_faster_on_every_rank_and_refuses_one_that_changes_one_node(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "t"
    run = ccoverlap("tune", "--budget", "4", "--skip", "2", "--steps", "3", "--out", str(out),
                    "--env", "DOCTOR_TRAIN_SLEEP_MS=0", "--env", "DOCTOR_TRAIN_LOCAL_LR=0.5",
                    "--", *TWO_NODES, "--nproc-per-node", "1", TRAIN, "--steps", "100000",
                    env={"DOCTOR_TRAIN_SLEEP_MS": "60"})
    assert run.returncode == 0, run.stderr[-3000:]
    doc = json.loads((out / "tune.json").read_text())
    assert doc["decision"] == "tuned" and doc["best"]["knobs"] == {"DOCTOR_TRAIN_SLEEP_MS": "0"}
    assert doc["comparison"]["verdict"] == "faster"
    changed = [t for t in doc["trials"] if t["knobs"] == {"DOCTOR_TRAIN_LOCAL_LR": "0.5"}]
    assert changed and all(t["refused"] and "changed the result" in t["refused"] for t in changed)
    # every trial read both nodes' ranks; the refused knob changed node 1's parameters and nothing on node 0
    default = next(t for t in doc["trials"] if t["name"] == "default")
    prints = {name: {r.rank: (r.header["node"], r.fingerprint) for r in record.read_all(Path(t["folder"]))[0]}
              for name, t in (("default", default), ("changed", changed[0]))}
    assert {rank: node for rank, (node, _) in prints["changed"].items()} == {0: 0, 1: 1}  # one rank a node
    assert [prints["default"][rank][1] == fp for rank, (_, fp) in sorted(prints["changed"].items())] == [True, False]
