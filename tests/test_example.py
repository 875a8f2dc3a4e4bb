"""`ccoverlap example`: the capture shipped in the package is declared as package data, readable through
importlib.resources, under 2 MB with its provenance, and analyses to the known answer (the lever priority)."""
import fnmatch
import json
import tomllib
from pathlib import Path

from ccoverlap import examples
from ccoverlap.cli import main

ROOT = Path(__file__).resolve().parents[1]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_example_is_package_data_readable_through_resources():
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["ccoverlap"]
    shipped = examples.files()
    names = {f.name for f in shipped}
    assert {"rank0_trace.json.gz", "rank0_trace.alone.gz", examples.PROVENANCE} <= names
    for f in shipped:  # each file a wheel would carry: matched by a package-data pattern, relative to ccoverlap/
        assert any(fnmatch.fnmatch(f"examples/{examples.DEFAULT}/{f.name}", p) for p in patterns), f.name
    assert sum(len(f.read_bytes()) for f in shipped) < 2e6
    provenance = json.loads((next(f for f in shipped if f.name == examples.PROVENANCE)).read_text())
    assert provenance["recorded_by"]["gpu"] == "NVIDIA H200" and len(provenance["recorded_by"]["commit"]) == 40
    assert (ROOT / provenance["record"].split(" ")[0]).exists()  # the results file it comes from


def test_example_then_analyze_gives_the_known_lever(capsys, tmp_path):
    code, out, _ = run(capsys, "example", tmp_path / "ex")
    assert code == 0 and "ccoverlap analyze" in out and "ccoverlap whatif" in out and "--perfetto" in out
    code, out, _ = run(capsys, "analyze", tmp_path / "ex")
    verdict = next(line for line in out.splitlines() if line.startswith("verdict"))
    assert code == 0 and "try priority" in verdict


def test_example_refuses_a_folder_with_files(capsys, tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "example", tmp_path)
    assert code == 2 and "holds files already" in err and (tmp_path / "keep.txt").read_text() == "mine"
