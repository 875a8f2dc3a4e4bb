"""The one plotting style: no pyplot anywhere, one place that makes figures, PNGs written atomically."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from ccoverlap.util import plotting

SRC = Path(__file__).parents[1] / "src" / "ccoverlap"


def _imports(path: Path) -> set[str]:
    """Every module a file imports, with `from m import x` read as m and m.x."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return found


def test_no_module_imports_pyplot():
    offenders = [p.relative_to(SRC) for p in SRC.rglob("*.py") if "matplotlib.pyplot" in _imports(p)]
    assert offenders == []


def test_figures_are_made_in_one_place():
    makers = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
              if _imports(p) & {"matplotlib.figure", "matplotlib.backends.backend_agg"}}
    assert makers == {"util/plotting.py"}


def test_every_plot_module_draws_without_pyplot(tmp_path):
    """The lab's, the bench's and the analysis's pictures, drawn in a fresh process: pyplot is never loaded."""
    script = f"""
import sys
from pathlib import Path
from ccoverlap.bench import plots as bench_plots
from ccoverlap.lab import plots as lab_plots
from ccoverlap.analysis.plots import timeline_png
from ccoverlap.analysis.reader import read_trace
out = Path({str(tmp_path)!r})
lab = [{{"compute": "fma", "comm": "nccl", "strategy": s, "order": "with", "status": "ok", "total_ms": t,
        "total_ms_min": t - 0.1, "total_ms_max": t + 0.1, "comm_done_ms": 2.5, "compute_alone_ms": 6.0,
        "comm_alone_ms": 2.0, "sequential_ms": 8.0}} for s, t in (("sequential", 8.0), ("priority", 6.4))]
lab_plots.bars(lab, out / "lab.png")
bench = [{{"workload": "ddp", "status": "ok", "strategy": s, "step_ms": t, "exposed_comm_ms": 1.0,
          "runs": [{{"step_samples_ms": [t - 0.2, t, t + 0.3]}}]}} for s, t in (("default", 5.0), ("priority", 4.5))]
bench_plots.bars(bench, out / "bench.png")
trace = read_trace(Path({str(Path(__file__).parent / "data" / "traces" / "handmade" / "rank0_trace.json")!r}))
(out / "timeline.png").write_bytes(timeline_png(trace.kernels, [False] * len(trace.kernels), "t"))
assert "matplotlib.pyplot" not in sys.modules, "pyplot was imported"
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench.png", "lab.png", "timeline.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in tmp_path.iterdir())


def _figure():
    fig = plotting.new_figure(3, 2)
    fig.add_subplot().plot([0, 1], [1, 0])
    return fig


def test_save_png_writes_a_png_and_nothing_else(tmp_path):
    path = plotting.save_png(_figure(), tmp_path / "a.png")
    assert path.read_bytes().startswith(b"\x89PNG") and list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("existing", [False, True])
def test_save_png_failure_leaves_nothing(tmp_path, full_disk, existing):
    """A full disk half-way through the write: no cut PNG, no temporary file, an older PNG untouched."""
    target = tmp_path / "a.png"
    if existing:
        target.write_bytes(b"old picture")
    full_disk(tmp_path)
    with pytest.raises(OSError, match="No space left"):
        plotting.save_png(_figure(), target)
    assert [p.name for p in tmp_path.iterdir()] == (["a.png"] if existing else [])
    if existing:
        assert target.read_bytes() == b"old picture"
