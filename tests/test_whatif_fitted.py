"""The what-if names the GPU it predicts for and whether its model was fitted there (issue 32.3): a capture from a
GPU without a fitted model is refused in one line naming the GPU, --unvalidated and --device; with --unvalidated
it is predicted, labelled; --device predicts the step moved to a preset, labelled with its assumptions."""
from __future__ import annotations

import gzip
import json

from test_whatif import serial_capture

from ccoverlap.cli import main


def _elsewhere(root, name: str):
    """The synthetic capture, its trace and its alone window recorded on another GPU (same limits)."""
    for path in root.iterdir():
        packed = path.name.endswith(".gz")
        doc = json.loads(gzip.decompress(path.read_bytes()) if packed else path.read_text())
        doc["deviceProperties"][0]["name"] = name
        text = json.dumps(doc).encode()
        path.write_bytes(gzip.compress(text) if packed else text)
    return root


def test_a_gpu_without_a_fitted_model_is_refused_then_predicted_only_when_asked(tmp_path, capsys):
    cap = _elsewhere(serial_capture(tmp_path / "cap"), "NVIDIA A100-SXM4-80GB")
    assert main(["whatif", str(cap), "--lever", "priority", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["captured_on"] == "NVIDIA A100-SXM4-80GB" and out["predictions"] == []
    assert out["refused"].startswith("no model fitted for the captured GPU (NVIDIA A100-SXM4-80GB; the what-if "
                                     "is fitted on the NVIDIA H200 only)")
    assert "--unvalidated" in out["refused"] and "--device" in out["refused"]
    assert not out["calibration"]["fitted_on_the_captured_gpu"]
    assert main(["whatif", str(cap), "--lever", "priority", "--unvalidated", "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unvalidated"] and out["label"].startswith("UNVALIDATED (no model fitted for the captured GPU")
    assert [p["strategy"] for p in out["predictions"]] == ["default", "priority"]
    assert main(["whatif", str(cap), "--device", "h200", "--json", "-"]) == 0  # moved by the peaks' ratio
    out = json.loads(capsys.readouterr().out)
    assert out["refused"] is None and out["predictions"] and out["label"].startswith("predicted, assumptions: ")


def test_a_gpu_without_peak_numbers_cannot_be_moved_either(tmp_path, capsys):
    cap = _elsewhere(serial_capture(tmp_path / "cap"), "NVIDIA GeForce RTX 5090")
    assert main(["whatif", str(cap), "--device", "h200"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device h200: no peak numbers for the NVIDIA GeForce RTX 5090" in err


def test_the_captured_gpu_with_its_model_is_predicted_and_says_so(tmp_path, capsys):
    assert main(["whatif", str(serial_capture(tmp_path / "cap")), "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["refused"] is None and out["calibration"]["fitted_on_the_captured_gpu"]
    assert out["label"] == "predicted for the captured GPU"
