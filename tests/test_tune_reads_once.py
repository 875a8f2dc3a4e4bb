"""The tuner reads the doctor's capture once (issue 29.5): its view of the default and the what-if predictions
that order and prune its arms come from one analysis of the folder, not two."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_whatif import serial_capture

from ccoverlap.analysis import analyze
from ccoverlap.tune import session as tune_session
from ccoverlap.whatif import session as whatif_session


def test_the_what_if_gains_take_the_analysis_they_are_given(tmp_path, monkeypatch):
    cap = serial_capture(tmp_path / "cap")
    once = analyze(cap)
    monkeypatch.setattr(whatif_session, "analyze", lambda *a, **k: pytest.fail("the capture was read again"))
    assert "priority" in whatif_session.gains(cap, None, ["priority"], once)


def test_the_doctors_view_and_its_predictions_read_the_folder_once(tmp_path, monkeypatch):
    cap = serial_capture(tmp_path / "cap")
    reads = []
    monkeypatch.setattr(tune_session, "analyze", lambda *a, **k: reads.append(a[0]) or analyze(*a, **k))
    monkeypatch.setattr(whatif_session, "analyze", lambda *a, **k: pytest.fail("the capture was read again"))
    got = tune_session.advice(SimpleNamespace(ok=True, folder=cap, error=None), None)
    assert reads == [cap] and got is not None and got.predicted and "priority" in got.predicted
