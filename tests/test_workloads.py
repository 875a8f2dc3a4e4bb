"""The bench's training workloads outside the bench: the train script (same losses as the bench's ranks), the
streaming DiLoCo workload's outer loop (it averages; it measures late syncs; no-overlap waits at once), and the
MoE layer's static shapes (no data-dependent shape: nothing waits for the host)."""
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ccoverlap.gpu import cuda_driver
from ccoverlap.cli import main as ccoverlap

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from ccoverlap.bench import emulate, train, workloads  # noqa: E402
from ccoverlap.bench.config import FULL  # noqa: E402
from ccoverlap.bench.launcher import _free_port  # noqa: E402
from ccoverlap.bench.models import MoE  # noqa: E402

DATA = Path(__file__).parent / "data"


def _train(*argv: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ccoverlap.bench.train", *argv], env=env or os.environ, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_the_train_script_trains_as_the_bench_ranks_do(tmp_path, monkeypatch, capsys):
    """Same builders, same seeds: its losses are the bench's, step by step (the CPU preset: 1 warm-up + 3 steps)."""
    runs = {name: _train(name, "--device", "cpu", "--steps", "4", "--log-every", "1") for name in ("ddp", "diloco")}
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    out = tmp_path / "b.json"
    assert ccoverlap(["bench", "--workload", "ddp,diloco", "--device", "cpu", "--nproc", "1", "--strategies", "default",
                      "--repeats", "1", "--json", str(out)]) == 0, capsys.readouterr()
    bench = {r["workload"]: r["losses"] for r in json.loads(out.read_text())["rows"]}
    for name, proc in runs.items():
        printed, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        lines = printed.splitlines()
        assert lines[:4] == [f"step {i} loss {loss:.6f}" for i, loss in enumerate(bench[name], 1)]
        assert (lines[4].startswith(f"{name}: 4 steps in ")
                and lines[4].endswith(f"final loss {bench[name][-1]:.6f} (world 1, gloo)"))


@pytest.mark.parametrize(("argv", "message"), [
    (["micro"], "workload micro: valid ddp, fsdp, tp, moe, diloco"),
    (["ddp", "--steps", "0"], "--steps=0 is out of range"),
    (["ddp", "--log-every", "0"], "--log-every=0 is out of range"),
    (["tp", "--heads", "3", "--d-model", "6", "--comm", "emulate", "--emulate-world", "2"],
     "tp: world size 2 must divide --heads 3"),
    (["ddp", "--comm", "nccl"], "--comm nccl needs GPUs"),
])
def test_bad_train_input_is_one_line_exit_2_and_leaves_the_environment(argv, message, capsys):
    before = dict(os.environ)
    assert train.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and dict(os.environ) == before


def test_a_train_option_of_the_wrong_type_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        train.main(["ddp", "--steps", "x"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "argument --steps: invalid int value" in err


def test_train_options_are_the_bench_fields_with_their_defaults():
    args = train.parser().parse_args(["ddp"])
    cfg = train.config(args, gpus=1)
    assert (cfg.steps, cfg.log_every, cfg.comm, cfg.emulate_world, cfg.busbw_gbps) == (50, 10, "auto", 8, 280.0)
    bench = cfg.bench("ddp", world=1, gpus=1)
    assert (bench.comm, bench.size, bench.seed) == ("emulate", FULL, 0)
    cpu = train.config(train.parser().parse_args(["ddp", "--layers", "3"]), gpus=0)
    assert cpu.size.layers == 3 and cpu.size.d_model == 64  # the tiny model on the CPU; options given win
    assert train.single_process_env({"WORLD_SIZE": "2", "RANK": "1"}) == {}  # torchrun's: left alone
    single = train.single_process_env({})
    assert ((single["RANK"], single["WORLD_SIZE"], single["MASTER_ADDR"]) == ("0", "1", "127.0.0.1")
            and int(single["MASTER_PORT"]))


def test_diloco_averages_fragments_and_measures_late_syncs(tmp_path):
    env = os.environ | {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
                        "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(DATA / "diloco_ranks.py"), str(tmp_path)],
                              env=env | {"RANK": str(r)}, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for no_overlap in (True, False):
        r0, r1 = ranks[0][no_overlap], ranks[1][no_overlap]
        assert (r0["fragments"], r0["window"]) == (2, 2)  # 2 blocks: 2 fragments, and the window is at most that
        assert not torch.equal(r0["before"][0], r1["before"][0])  # the ranks' fragments differed
        for i, (a0, a, b) in enumerate(zip(r0["anchor0"], r0["anchor"], r1["anchor"])):
            assert torch.equal(a, b)  # after the window both ranks hold the same anchor
            mean_delta = (2 * a0 - r0["before"][i] - r1["before"][i]) / 2
            step = workloads.OUTER_LR * (1 + workloads.OUTER_MOMENTUM) * mean_delta  # Nesterov's first step
            assert torch.allclose(a, a0 - step, atol=1e-6)
            for r in (r0, r1):  # each rank merges its local parameters with the new anchor
                merged = workloads.MERGE_LOCAL * r["before"][i] + (1 - workloads.MERGE_LOCAL) * a
                assert torch.allclose(r["after"][i], merged, atol=1e-6)
        assert r0["counters"]["syncs"] == 1
    # no-overlap waited as it launched; overlapped, rank 0 found its sync unfinished at the window's end
    assert ranks[0][True]["done_at_launch"] and ranks[0][True]["counters"]["late_syncs"] == 0
    late = ranks[0][False]["counters"]
    assert not ranks[0][False]["done_at_launch"] and late["late_syncs"] == 1 and late["stall_ms"] > 100


@pytest.fixture
def four_emulated_ranks():
    emulate.init(emulate.CpuMover(emulate.Emulation(world=4)), "ccov_emulate")
    yield
    dist.destroy_process_group()


def _moe_by_boolean_indexing(m: MoE, x):
    """The routing MoE.forward implements, written with data-dependent shapes (the reference)."""
    from torch.distributed.nn.functional import all_to_all_single
    from torch.nn import functional as F

    tokens = x.reshape(-1, x.shape[-1])
    n, d = tokens.shape
    prob, expert = F.softmax(m.gate(tokens), dim=-1).max(dim=-1)
    dest, cap = expert // m.local, n // m.world
    seen = torch.zeros(m.world, dtype=torch.long)
    slot = torch.full((n,), -1)
    for i in range(n):  # first come, first served, up to capacity per destination
        if seen[dest[i]] < cap:
            slot[i] = dest[i] * cap + seen[dest[i]]
            seen[dest[i]] += 1
    keep = slot >= 0
    send = torch.zeros(m.world * cap, d + 1)
    send[slot[keep], :d] = tokens[keep]
    send[slot[keep], d] = (expert[keep] % m.local).float() + 1
    recv = all_to_all_single(torch.empty_like(send), send)
    out = torch.zeros(recv.shape[0], d)
    which = recv[:, d].round().long() - 1
    for e, mlp in enumerate(m.experts):
        if (mask := which == e).any():
            out[mask] = mlp(recv[mask, :d])
    back = all_to_all_single(torch.empty_like(out), out)
    y = torch.zeros_like(tokens)
    y[keep] = back[slot[keep]] * prob[keep, None]
    return y.reshape(x.shape), int((~keep).sum())


def test_moe_has_static_shapes_and_routes_as_top1_with_capacity(four_emulated_ranks):
    from torch._subclasses.fake_tensor import FakeTensorMode

    warnings.filterwarnings("ignore", category=FutureWarning)  # torch.distributed.nn's all_to_all_single
    warnings.filterwarnings("ignore", message=".*data pointer of FakeTensor")  # the emulation's in-place check
    torch.manual_seed(0)
    m = MoE(16, 2)
    x = torch.randn(2, 12, 16)
    expected, dropped = _moe_by_boolean_indexing(m, x)
    assert dropped > 0  # some destination was over capacity
    assert torch.allclose(m(x), expected, atol=1e-6)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:  # a data-dependent shape or host read raises here
        assert m(mode.from_tensor(x)).shape == x.shape


def test_a_workloads_counters_reach_its_row_as_the_worst_ranks():
    from ccoverlap.bench import launcher

    ranks = [{"rank": r, "step_ms": [1.0], "compute_only_ms": None, "losses": [1.0], "note": "", "wall_s": 1.0,
              "counters": {"late_syncs": r, "stall_ms": 2.0 - r}} for r in (0, 1)]
    (row,) = launcher.aggregate(launcher.summarize("diloco", "default", ranks, {}))
    assert (row["late_syncs"], row["stall_ms"]) == (1, 2.0)
