import json
import random

import pytest

from ccoverlap.util import stats


def _runs(mean: float, n_runs: int, steps: int, noise: float, seed: int, run_noise: float = 0.0):
    rng = random.Random(seed)
    out = []
    for _ in range(n_runs):
        offset = rng.gauss(0, run_noise)
        out.append([mean + offset + rng.gauss(0, noise) for _ in range(steps)])
    return out


def test_a_clear_speedup_is_faster_and_its_interval_holds_the_true_ratio():
    base, cand = _runs(100, 3, 20, 1.0, 1), _runs(90, 3, 20, 1.0, 2)
    c = stats.compare(base, cand)
    assert c.verdict == stats.FASTER
    assert c.lo < c.ratio < c.hi < 1 and c.ratio == pytest.approx(0.9, abs=0.01)
    assert c.speedup == pytest.approx(1 / c.ratio)
    assert c.runs == (3, 3) and c.steps == (60, 60)


def test_a_slowdown_is_slower_and_equal_runs_are_within_noise():
    base = _runs(100, 3, 20, 2.0, 3)
    assert stats.compare(base, _runs(110, 3, 20, 2.0, 4)).verdict == stats.SLOWER
    assert stats.compare(base, _runs(100, 3, 20, 2.0, 5)).verdict == stats.NOISE


def test_noise_between_runs_widens_the_interval():
    """A 3% gap is clear when runs agree, within noise when whole runs wander by 5%."""
    tight = stats.compare(_runs(100, 4, 20, 0.5, 6), _runs(97, 4, 20, 0.5, 7))
    loose = stats.compare(_runs(100, 4, 20, 0.5, 6, run_noise=5), _runs(97, 4, 20, 0.5, 7, run_noise=5))
    assert tight.verdict == stats.FASTER
    assert loose.hi - loose.lo > 3 * (tight.hi - tight.lo)


def test_the_same_samples_give_the_same_interval_and_the_label_shows_it():
    base, cand = _runs(50, 2, 10, 1, 8), _runs(49, 2, 10, 1, 9)
    a, b = stats.compare(base, cand, seed=3), stats.compare(base, cand, seed=3)
    assert a == b
    assert a.label().startswith(f"{a.ratio:.3f}x [{a.lo:.3f}-{a.hi:.3f}]")
    assert a.to_dict()["ci"] == [a.lo, a.hi]
    assert stats.Comparison.from_dict(json.loads(json.dumps(a.to_dict()))) == a  # read back from results


@pytest.mark.parametrize("base,cand,what", [([], [[1.0]], "baseline"), ([[1.0]], [[]], "candidate"),
                                            ([[1.0, -2.0]], [[1.0]], "positive")])
def test_bad_samples_are_refused(base, cand, what):
    with pytest.raises(ValueError, match=what):
        stats.compare(base, cand)
