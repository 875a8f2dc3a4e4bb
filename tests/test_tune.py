"""The tuner's logic on the CPU: the search over fake trials, the candidate space, the step records."""
from __future__ import annotations

import math
import random
import signal

import pytest

from ccoverlap.control import levers
from ccoverlap.doctor import record
from ccoverlap.util.errors import UsageError
from ccoverlap.control.procs import Stopped
from ccoverlap.tune import space
from ccoverlap.tune.config import TuneConfig, knob
from ccoverlap.tune.search import CommandFailed, Search, Advice
from ccoverlap.tune.trial import Trial, drift, steps_of
from ccoverlap.control.policy import TunedPolicy

CUDA = levers.Host("cuda", nccl=(2, 28, 9), compute_capability=(9, 0), sm_carveout=True, green_contexts=True,
                   interposer=True)


def P(text: str, **knobs: str) -> TunedPolicy:
    return TunedPolicy.of(text, knobs)


class Fake:
    """Trials whose step times are drawn around a mean per setting (the product of each lever's factor), with
    a clock that advances by each trial's length."""

    def __init__(self, factors: dict[str, float], *, base_ms=100.0, noise=0.5, trial_s=10.0, fail=(),
                 changes=(), timeout=False, default_fails=False, stop_at=None, unmarked=()):
        self.factors, self.base, self.noise, self.trial_s = factors, base_ms, noise, trial_s
        self.unmarked = unmarked  # levers whose trials leave no mark in their launches
        self.fail, self.changes, self.timeout = fail, changes, timeout
        self.default_fails, self.stop_at = default_fails, stop_at
        self.now, self.rng, self.calls = 0.0, random.Random(1), []

    def clock(self) -> float:
        return self.now

    def mean(self, policy: TunedPolicy) -> float:
        terms = [f"{n}={v}" for n, v in policy.levers] + [f"{n}={v}" for n, v in policy.knobs]
        return self.base * math.prod(self.factors.get(t, 1.0) for t in terms)

    def __call__(self, policy: TunedPolicy, phase: str, timeout: float, profile: bool) -> Trial:
        self.calls.append((policy.name, phase, timeout))
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise Stopped(signal.SIGINT)
        self.now += self.trial_s
        n = len(self.calls)
        if self.timeout:
            self.now += timeout
            return Trial(n, phase, policy, "timeout", wall_s=timeout, error="stopped")
        if (policy == space.DEFAULT and self.default_fails) or policy.name in self.fail:
            return Trial(n, phase, policy, "failed", wall_s=self.trial_s, error="exit code 1: boom")
        samples = tuple(self.rng.gauss(self.mean(policy), self.noise) for _ in range(20))
        norm = 1.0 + (0.01 if any(c in policy.name for c in self.changes) else 0.0)
        effect = {name: name not in self.unmarked for name, _ in policy.levers}
        return Trial(n, phase, policy, "ok", samples, {0: (norm, 2.0)}, wall_s=self.trial_s, gpu=True, effect=effect)


def search(fake: Fake, arms, budget=10.0, advice=None, **cfg) -> Search:
    doctor = (lambda t: advice) if advice is not None else None
    return Search(fake, list(arms), TuneConfig(budget=budget, **cfg).validate(), doctor, clock=fake.clock)


ARMS = [P("priority"), P("nccl-cluster"), P("nccl-ctas=8"), P("default", NCCL_ALGO="Tree")]


def test_a_clearly_faster_lever_is_kept_and_confirmed():
    fake = Fake({"priority=on": 0.9})
    out = search(fake, ARMS).run()
    assert out.kept and out.best == P("priority")
    assert out.comparison.verdict == "faster" and out.comparison.hi < 1
    assert out.speedup == pytest.approx(1 / 0.9, rel=0.02)
    assert out.comparison.runs[0] >= 3 and out.comparison.runs[1] >= 3  # confirmed on repeated runs
    phases = [p for _, p, _ in fake.calls]
    assert phases[:2] == ["baseline", "baseline"]


def test_a_lever_that_left_no_mark_is_no_effect_and_never_confirmed():
    """nccl-ctas=8 looks faster by a fluke of the noise, but its launches kept NCCL's grid: no effect. It is not run
    again, combined or confirmed; priority, which left its mark and is faster, is kept."""
    fake = Fake({"nccl-ctas=8": 0.85, "priority=on": 0.9}, unmarked=("nccl-ctas",))
    out = search(fake, ARMS).run()
    assert out.kept and out.best == P("priority")
    runs = [name for name, phase, _ in fake.calls if name == "nccl-ctas=8"]
    assert runs == ["nccl-ctas=8"]  # screened once, then dropped
    (trial,) = [t for t in out.trials if t.policy == P("nccl-ctas=8")]
    assert trial.no_effect == ["nccl-ctas"]
    from ccoverlap.tune import report

    assert any("no effect (nccl-ctas" in str(row) for row in report.trial_rows(out))
    assert any(row[-1] == "no effect" for row in report.setting_rows(out))


def test_when_only_an_unmarked_lever_looked_faster_the_default_is_kept():
    fake = Fake({"nccl-ctas=8": 0.85}, unmarked=("nccl-ctas",))
    out = search(fake, ARMS).run()
    assert not out.kept and "nccl-ctas=8 left no mark (no effect)" in out.reason


def test_levers_that_each_help_are_combined():
    fake = Fake({"priority=on": 0.9, "nccl-ctas=8": 0.9})
    out = search(fake, ARMS, budget=30).run()
    assert out.kept and set(dict(out.best.levers)) == {"priority", "nccl-ctas"}
    assert any(p == "combine" for _, p, _ in fake.calls)


def test_a_faster_setting_that_changes_the_result_is_refused():
    fake = Fake({"priority=on": 0.8, "nccl-cluster=1": 0.95}, changes=("priority",))
    out = search(fake, ARMS, budget=20).run()
    assert out.best != P("priority")
    refused = [t for t in out.trials if t.policy == P("priority")]
    assert refused and all(t.refused and "changed the result" in t.refused for t in refused)
    assert out.kept and out.best == P("nccl-cluster")


def test_the_programs_own_run_to_run_change_is_the_tolerance():
    """The default's second run differs by 2%: three times that is the program's own tolerance."""
    fake = Fake({"priority=on": 0.8}, changes=("priority",))
    s = search(fake, ARMS)
    fake_changes = iter([0.0, 0.02])  # the default's runs: the second moves the norms by 2%

    original = fake.__call__

    def call(policy, phase, timeout, profile):
        t = original(policy, phase, timeout, profile)
        if policy == space.DEFAULT and t.ok:
            t.fingerprints = {0: (1.0 + next(fake_changes, 0.0), 2.0)}
        return t

    s.run_trial = call
    out = s.run()
    assert out.tolerance == pytest.approx(3 * 0.02 / 1.02)
    assert out.kept and out.best == P("priority")


def test_nothing_helps_keeps_the_default_and_says_why():
    out = search(Fake({}), ARMS).run()
    assert not out.kept and out.best == space.DEFAULT and out.speedup == 1.0
    assert out.reason.startswith("default kept: nothing was faster beyond the noise")


def test_no_communication_prunes_the_levers_but_not_the_users_knobs():
    fake = Fake({})
    advice = Advice(False, 0.0, 0.0, (), "nothing to gain here")
    out = search(fake, ARMS, advice=advice).run()
    tried = {name for name, phase, _ in fake.calls if phase == "screen"}
    assert tried == {"NCCL_ALGO=Tree"}
    assert "no communication" in out.skipped["priority"]
    assert [p for _, p, _ in fake.calls][:3] == ["baseline", "baseline", "doctor"]


def test_levers_the_user_named_are_never_pruned():
    fake = Fake({})
    advice = Advice(True, 0.1, 0.5, (), "nothing to gain here")
    search(fake, [P("priority")], advice=advice, levers=("priority",)).run()
    assert any(name == "priority" for name, phase, _ in fake.calls if phase == "screen")


@pytest.mark.parametrize("recommended", [(), ("shape",)])
def test_below_the_headroom_line_the_levers_are_tried_only_where_the_doctor_still_names_one(recommended):
    """0.5% headroom in the median typical step: the levers are skipped, unless the doctor names one that some
    typical steps gain by (recommend._disagree); then every arm is screened, that one first, as above the line."""
    fake = Fake({})
    out = search(fake, [P("priority"), P("shape")], advice=Advice(True, 0.1, 0.5, recommended, "-")).run()
    screened = [name for name, phase, _ in fake.calls if phase == "screen"]
    if recommended:
        assert screened[0] == "shape" and set(screened) == {"priority", "shape"} and not out.skipped
    else:
        assert screened == [] and "scheduling headroom" in out.skipped["shape"]


def test_a_nothing_helps_run_with_nothing_to_try_ends_after_the_baseline():
    fake = Fake({})
    out = search(fake, [P("priority")], advice=Advice(False, 0.0, 0.0, (), "-")).run()
    assert len(fake.calls) == 3 and not out.kept
    assert "no communication" in out.reason


def test_the_doctors_recommendations_order_the_screening():
    fake = Fake({})
    advice = Advice(True, 10.0, 10.0, ("nccl-ctas=8", "nccl-cluster=1"), "headroom")
    search(fake, ARMS, advice=advice).run()
    screened = [name for name, phase, _ in fake.calls if phase == "screen"]
    assert screened[:3] == ["nccl-ctas=8", "nccl-cluster", "NCCL_ALGO=Tree"]


def test_a_command_failing_under_the_default_stops_at_once():
    fake = Fake({}, default_fails=True)
    with pytest.raises(CommandFailed, match="boom"):
        search(fake, ARMS).run()
    assert len(fake.calls) == 1


def test_a_budget_too_small_says_what_it_needs():
    with pytest.raises(UsageError,
                       match=r"too small: one trial of this command takes 60 s.*at least 6 \(--budget 7.5\)"):
        search(Fake({}, trial_s=60), ARMS, budget=1).run()


def test_a_budget_too_small_for_one_trial():
    with pytest.raises(UsageError, match="too small for one trial"):
        search(Fake({}, timeout=True), ARMS, budget=1).run()


def test_the_budget_bounds_the_search():
    fake = Fake({}, trial_s=10)
    search(fake, ARMS * 3, budget=2).run()
    assert fake.now <= 2 * 60 + 10


def test_a_failing_candidate_is_marked_and_never_kept():
    fake = Fake({"priority=on": 0.8, "nccl-ctas=8": 0.9}, fail=("priority",))
    out = search(fake, ARMS).run()
    failed = [t for t in out.trials if t.policy == P("priority")]
    assert failed and failed[0].status == "failed" and "boom" in failed[0].error
    assert out.best == P("nccl-ctas=8")


def test_the_trial_timeout_is_derived_from_the_first_run():
    fake = Fake({}, trial_s=30)
    search(fake, ARMS).run()
    assert fake.calls[0][2] == 600  # the first: the whole budget
    assert fake.calls[1][2] == 90 and all(t <= 90 for _, _, t in fake.calls[1:])  # then 3 x 30 s, or what is left


def test_ctrl_c_keeps_the_best_so_far_and_says_it_was_interrupted():
    fake = Fake({"priority=on": 0.8}, stop_at=8)
    out = search(fake, ARMS).run()
    assert out.interrupted == signal.SIGINT
    assert out.kept and out.best == P("priority")
    assert out.reason.startswith("priority is faster") and out.reason.endswith(
        "; interrupted by SIGINT: on the trials run so far")


@pytest.mark.parametrize(("stop_at", "reason"), [
    # after the baselines: not "no candidate fitted"
    (3, "default kept: interrupted by SIGINT before any candidate ran"),
    (6, "default kept: nothing was faster beyond the noise (closest: "),
])
def test_an_interrupted_search_that_keeps_the_default_says_so(stop_at, reason):
    out = search(Fake({}, stop_at=stop_at), ARMS).run()
    assert not out.kept and out.reason.startswith(reason) and "interrupted by SIGINT" in out.reason
    assert "interrupted" not in search(Fake({}), ARMS).run().reason  # a search that ran to its end does not


# -- the candidate space -------------------------------------------------------------------------------------

def test_arms_are_every_applicable_lever_value_and_every_knob_value():
    sp = space.arms(CUDA, (), {"NCCL_ALGO": ("Ring", "Tree")})
    names = [a.name for a in sp.arms]
    assert "priority" in names and "nccl-ctas" in names and "nccl-ctas=2" in names and "nccl-ctas=8" in names
    assert names[-2:] == ["NCCL_ALGO=Ring", "NCCL_ALGO=Tree"]
    assert "green" in sp.skipped and "green" not in names  # no effect in a training process


def test_on_the_cpu_no_lever_applies_and_a_chosen_one_is_refused():
    sp = space.arms(levers.Host("cpu"), (), {})
    assert sp.arms == () and set(sp.skipped) == {lv.name for lv in levers.LEVERS}
    with pytest.raises(UsageError, match="--levers priority: needs CUDA"):
        space.arms(levers.Host("cpu"), ("priority",), {})


def test_ordering_puts_the_recommended_value_first():
    arms = [P("nccl-ctas=4"), P("nccl-ctas=8"), P("priority"), P("default", X="1")]
    got = [a.name for a in space.ordered(arms, ("nccl-ctas=8",))]
    assert got == ["nccl-ctas=8", "nccl-ctas", "X=1", "priority"]


def test_a_recommended_combination_is_an_arm_of_its_own_at_its_rank():
    """The doctor names priority+comm-carveout-hint first where the hint alone gains nothing (so the combination
    stage, which pairs arms that each helped, would never try it): it is screened first, as one arm; not where one of
    its levers does not apply here."""
    arms = [P("priority"), P("comm-carveout-hint"), P("nccl-ctas=4"), P("default", X="1")]
    got = [a.name for a in space.ordered(arms, ("priority+comm-carveout-hint", "priority"))]
    assert got == ["priority+comm-carveout-hint", "priority", "X=1", "comm-carveout-hint", "nccl-ctas"]
    got = [a.name for a in space.ordered(arms[:1], ("priority+comm-carveout-hint", "priority"))]
    assert got == ["priority"]


def test_combining_two_settings_of_one_lever_or_variable_is_refused():
    assert space.combine(P("priority"), P("nccl-ctas=8")).name == "priority+nccl-ctas=8"
    assert space.combine(P("nccl-ctas=8"), P("nccl-ctas=16")) is None
    assert space.combine(P("nccl-ctas=8"), P("default", NCCL_MAX_CTAS="2")) is None


# -- configuration ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["NCCL_ALGO", "NCCL_ALGO=", "1X=a", "A=a,,b", "A=a,a"])
def test_malformed_env_is_one_line(text):
    with pytest.raises(UsageError, match="--env"):
        knob(text)


@pytest.mark.parametrize("kw,match", [({"budget": 0.1}, "--budget"), ({"steps": 2}, "--steps"),
                                      ({"levers": ("nope",)}, "unknown lever 'nope'"),
                                      ({"env": ("A=1", "A=2")}, "given twice"), ({"comm_regex": "("}, "--comm-regex")])
def test_bad_options_are_refused(kw, match):
    with pytest.raises(UsageError, match=match):
        TuneConfig(**kw).validate()


# -- step records ------------------------------------------------------------------------------------------------

def _record(rank, times, gpu=True, fingerprint=None):
    steps = tuple(record.Step(i + 1, t + 1, t if gpu else None, False, False) for i, t in enumerate(times))
    return record.RankRecord(None, rank, {}, steps, None, None, None, False, None, fingerprint)


def test_steps_after_the_skip_take_the_slowest_rank():
    samples, gpu, missing = steps_of([_record(0, [9, 9, 1, 5]), _record(1, [9, 9, 3, 2])], skip=2, steps=2)
    assert samples == (3, 5) and gpu and missing is None


def test_too_few_steps_say_what_the_trial_needs():
    _, _, missing = steps_of([_record(0, [1, 2, 3])], skip=2, steps=5)
    assert "made 3 optimizer step(s)" in missing and "--skip 2 + --steps 5" in missing


def test_host_times_where_a_rank_has_no_gpu_times():
    samples, gpu, _ = steps_of([_record(0, [1, 2], gpu=False)], skip=0, steps=2)
    assert not gpu and samples == (2, 3)


def test_drift_is_the_largest_relative_change_and_inf_where_runs_do_not_match():
    assert drift({0: (1.0, 2.0)}, {0: (1.0, 2.0)}) == 0
    assert drift({0: (1.0, 2.0)}, {0: (1.0, 2.2)}) == pytest.approx(0.2 / 2.2)
    assert drift({0: (1.0,)}, {1: (1.0,)}) == math.inf
    assert drift({0: (1.0,)}, {0: (1.0, 2.0)}) == math.inf


def test_a_change_within_the_parameters_rounding_is_the_same_result():
    """A setting that only reorders sums (OMP_NUM_THREADS=2: 3.8e-10 on float32 parameters) is not CHANGED, though
    the default's own runs agree bit for bit; a change beyond 8 units of float32 rounding is, and its refusal says
    the tolerance, its parts and the option that widens it."""
    unit = 2.0 ** -24  # float32's unit roundoff

    def run(change: float) -> Search:
        fake = Fake({"priority=on": 0.8}, changes=())
        original = fake.__call__

        def call(policy, phase, timeout, profile):
            t = original(policy, phase, timeout, profile)
            if t.ok:
                t.rounding = unit
                t.fingerprints = {0: (1.0 + (change if policy != space.DEFAULT else 0.0), 2.0)}
            return t

        s = search(fake, ARMS)
        s.run_trial = call
        return s

    s = run(3.8e-10)
    out = s.run()
    assert out.tolerance == pytest.approx(8 * unit) and out.kept and out.best == P("priority")
    s = run(1e-5)
    out = s.run()
    refused = [t.refused for t in out.trials if t.refused]
    assert not (out.kept and out.best == P("priority")) and refused
    assert f"tolerance {8 * unit:.2e}" in refused[0] and "rounding x8" in refused[0] and "--result-rtol R" in refused[0]


@pytest.mark.parametrize("order,asked", [("doctor", True), ("registry", False)])
def test_order_registry_runs_no_doctor_on_a_gpu_host(order, asked, tmp_path, monkeypatch):
    """--order registry is the baseline that measures what the doctor saves: no profiled run, nothing skipped."""
    from ccoverlap.tune import session

    seen = {}

    class Stub:
        def __init__(self, runner, arms, cfg, doctor, skipped, on_trial):
            seen["doctor"] = doctor

        def run(self):
            raise KeyboardInterrupt  # stop before any trial: only the wiring is under test

    monkeypatch.setattr(session.levers.Host, "detect", staticmethod(lambda: CUDA))
    monkeypatch.setattr(session, "found", lambda cmd, env: None)
    monkeypatch.setattr(session.search, "Search", Stub)
    with pytest.raises(KeyboardInterrupt):
        session.run(TuneConfig(order=order, out=str(tmp_path / "t")).validate(), ["true"])
    assert (seen["doctor"] is not None) is asked
