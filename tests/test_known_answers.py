"""The known-answer programs' table and the device script's arithmetic (CPU: the programs themselves need a GPU,
bench/device/known_answers.sh runs them)."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from ccoverlap.control import levers

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench" / "device"))
import known_answers as ka  # noqa: E402

HOST = levers.Host("cuda", nccl=(2, 28, 9), compute_capability=(9, 0), sm_carveout=True, green_contexts=True,
                   interposer=True)


def test_every_case_is_a_program_with_a_lever_of_the_registry():
    assert len(ka.CASES) >= 6
    for name, case in ka.CASES.items():
        assert (REPO / "bench" / "known" / f"{name}.py").exists(), name
        assert case["truth"] and (case["lever"] is None or levers.strategy(case["lever"]).levers)
    assert {c["lever"] for c in ka.CASES.values()} >= {"carveout-hint", "priority", "nccl-cluster=1", None}


def _realized(monkeypatch, medians: dict[str, float]) -> dict:
    rnd = random.Random(0)

    def fake(name, strategy, out, host, cli=False):
        m = medians.get(strategy or "plain", medians["plain"])
        return {"strategy": strategy or "plain", "cli": cli, "code": 0, "process_wall_s": 1.0,
                "samples_ms": [rnd.gauss(m, 0.005) for _ in range(17)], "losses": ["0x1p+0"], "comm": {},
                "loop_wall_s": 0.1, "tail": None}

    monkeypatch.setattr(ka, "program", fake)
    return ka.realized("carveout", Path("/tmp"), ka.candidates(HOST), HOST, "carveout-hint")


def test_the_realized_best_is_the_fastest_lever_beyond_the_noise(monkeypatch):
    real = _realized(monkeypatch, {"plain": 4.34, "carveout-hint": 3.34, "max-connections": 3.35, "nccl-ctas": 7.3})
    assert real["best_lever"] == "carveout-hint" and real["best_gain_ms"] == pytest.approx(1.0, abs=0.01)
    assert real["levers"]["nccl-ctas"]["verdict"] == "slower" and all(r["same_losses"] for r in real["levers"].values())
    assert [r["cli"] for r in real["runs"]].count(True) == 1  # the lever once more through `ccoverlap run`


def test_the_targets_of_one_program(monkeypatch):
    real = _realized(monkeypatch, {"plain": 4.34, "carveout-hint": 3.34})
    doc = {"lever_headroom_ms": 2.0, "headroom_ms": 2.0, "analysed_steps": 3, "window_s": 1.0, "alone_window_s": 1.4,
           "recommendations": [{"lever": "carveout-hint"}],
           "steps": [{"lever_headroom_us": 0.0}, {"lever_headroom_us": 1000.0}, {"lever_headroom_us": 1000.0}]}
    got = ka.judge(ka.CASES["carveout"], real, doc)
    assert got["lever_headroom_per_step_ms"] == 1.0 and got["lever_headroom_mean_per_step_ms"] == pytest.approx(2 / 3)
    assert got["headroom_target_met"] and got["first_lever_target_met"] and not got["says_nothing_to_gain"]
    assert got["alone_window_cost_ratio"] == pytest.approx(1.4)
    wrong = ka.judge(ka.CASES["carveout"], real, doc | {"recommendations": [{"lever": "nccl-ctas"}],
                                                       "steps": [{"lever_headroom_us": 100.0}] * 3})
    assert not wrong["headroom_target_met"] and not wrong["first_lever_target_met"]
    nothing = ka.judge(ka.CASES["same_name"], real | {"best_lever": None, "best_gain_ms": 0.0},
                       doc | {"recommendations": [], "steps": [{"lever_headroom_us": 10.0}] * 3})
    assert nothing["says_nothing_to_gain"] and nothing["nothing_target_met"] and nothing["headroom_target_met"]


def test_the_typical_step_targets(monkeypatch):
    """A doctor of the typical step: its headline read as it is; the first profiled steps named and left out
    (atypical), the wave tail named with its replayed cost."""
    real = _realized(monkeypatch, {"plain": 4.34, "priority": 3.34})
    steps = [{"name": f"ProfilerStep#{n}", "lever_headroom_us": 1000.0} for n in range(1, 6)]
    doc = {"lever_headroom_ms": 1.0, "headroom_ms": 1.1, "typical_steps": [s["name"] for s in steps[2:]],
           "left_out_steps": [{"step": "ProfilerStep#1", "reason": "span"}, {"step": "ProfilerStep#2", "reason": "x"}],
           "recommendations": [{"lever": "priority"}], "steps": steps}
    got = ka.judge(ka.CASES["atypical"], real, doc)
    assert got["lever_headroom_per_step_ms"] == 1.0 and got["headroom_target_met"] and got["atypical_target_met"]
    assert not ka.judge(ka.CASES["atypical"], real, doc | {"left_out_steps": []})["atypical_target_met"]
    tail = ka.judge(ka.CASES["wave_tail"], real | {"best_lever": None, "best_gain_ms": 0.0},
                    doc | {"recommendations": [], "lever_headroom_ms": 0.0, "by_mechanism_ms":
                           {"compute_slowed": 0.3, "compute_slowed:wave_tail": 0.25},
                           "verdict": "nothing a scheduling lever can do: ... wave tail: nvjet ..."})
    assert tail["wave_tail_named"] and tail["wave_tail_cost_ms"] == 0.25 and tail["nothing_target_met"]


def test_the_wave_tails_measured_cost_is_the_gemms_lateness_beyond_alone_and_the_collective():
    # steps: GEMM 2.5 ms beside (1.6 alone) joined with a collective ending 0.9 ms after the GEMM's ready time: 0.9;
    # GEMM 1.7 with the collective at 1.9: the collective bound the join, nothing; GEMM 2.0, collective 0.5: 0.4
    run = {"spans_ms": {"gemm": [2.5, 1.7, 2.0], "comm_end": [0.9, 1.9, 0.5]}, "notes": {"gemm_alone_ms": 1.6}}
    assert ka.wave_tail_cost([run]) == pytest.approx(0.4)
    assert ka.wave_tail_cost([run, {**run, "spans_ms": {"gemm": [2.6], "comm_end": [1.0]}}]) == pytest.approx(0.65)
    assert ka.wave_tail_cost([{"spans_ms": {}, "notes": {}}]) is None  # not a wave-tail program
