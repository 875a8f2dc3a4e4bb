"""CLI options come from the config dataclasses (util/options.py): one default per field, shown in
--help; presets are named overrides that options given on the command line beat. And the bench's
two tables (workloads, communication backends) are where their differences live."""
import re
from pathlib import Path

import pytest

from ccoverlap.gpu import cuda_driver
from ccoverlap.control import levers
from ccoverlap.bench import catalog, comms, launcher
from ccoverlap.bench.config import FULL, MICRO_TINY, TINY, BenchConfig
from ccoverlap.cli import build_parser
from ccoverlap.util import options as _config
from ccoverlap.cli import bench as cli_bench
from ccoverlap.cli import lab as cli_lab
from ccoverlap.lab.config import QUICK, LabConfig

CONFIGS = [("bench", BenchConfig), ("lab", LabConfig)]


@pytest.mark.parametrize(("command", "cls"), CONFIGS)
def test_argparse_defaults_are_the_dataclass_defaults(command, cls):
    args = build_parser().parse_args([command])
    fields = list(_config.options(cls))
    assert len(fields) >= 12
    for path, _, default in fields:
        assert getattr(args, path) == default, path
    assert _config.from_args(cls, args) == cls()


@pytest.mark.parametrize(("command", "cls"), CONFIGS)
def test_help_shows_every_default(command, cls, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option: nothing wrapped
    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    blocks = [" ".join(b.split()) for b in re.split(r"\n  (?=-)", capsys.readouterr().out)]
    for _, f, default in _config.options(cls):
        line = next(b for b in blocks if b.startswith(_config.flag(f) + " "))
        shown = f.metadata.get("shown") or (",".join(map(str, default)) if isinstance(default, tuple)
                                            else format(default, "g") if isinstance(default, float) else str(default))
        if default is not None or "shown" in f.metadata:
            assert f"(default: {shown}" in line, line


def test_the_lab_keeps_the_defaults_its_cli_gave():
    d = LabConfig()
    assert (d.comms, d.orders, d.reps, d.warmup) == (("nccl", "light"), ("before", "with", "delayed"), 20, 3)


def test_quick_is_a_preset_that_given_options_beat():
    parse = build_parser().parse_args
    quick = cli_lab._config(parse(["lab", "--quick"]))
    assert quick == LabConfig(comms=("nccl",), orders=("with",), reps=10, warmup=2)
    assert {k: getattr(quick, k) for k in QUICK} == QUICK
    assert cli_lab._config(parse(["lab", "--quick", "--reps", "30", "--compute", "fma"])) == LabConfig(
        computes=("fma",), comms=("nccl",), orders=("with",), reps=30, warmup=2)


def test_bench_presets_on_the_cpu_and_on_gpus(monkeypatch):
    parse = build_parser().parse_args
    monkeypatch.setattr(cuda_driver, "driver", lambda: None)
    cpu = cli_bench._config(parse(["bench", "--layers", "3", "--steps", "5"]))
    assert (cpu.device, cpu.comm, cpu.nproc, cpu.steps, cpu.warmup) == ("cpu", "gloo", 2, 5, 1)
    assert cpu.size == TINY.__class__(**(vars(TINY) | {"layers": 3})) and cpu.micro_sizes == MICRO_TINY
    monkeypatch.setattr(cli_bench, "_gpu_count", lambda: 2)
    gpus = cli_bench._config(parse(["bench"]))
    assert ((gpus.device, gpus.comm, gpus.nproc, gpus.steps, gpus.size, gpus.micro_gemm)
            == ("cuda", "nccl", 2, 8, FULL, 8192))
    tiny = cli_bench._config(parse(["bench", "--tiny", "--seq", "64"]))
    assert tiny.size.seq == 64 and tiny.size.layers == TINY.layers and tiny.micro_gemm == 256 and tiny.steps == 8
    monkeypatch.setattr(cli_bench, "_gpu_count", lambda: 1)
    one = cli_bench._config(parse(["bench", "--workload", "ddp"]))
    assert (one.comm, one.nproc, one.world) == ("emulate", 1, 8)


def test_workload_table_drives_rows_tables_and_plots():
    assert [w.name for w in catalog.WORKLOADS] == ["micro", "ddp", "fsdp", "tp", "moe", "diloco"]
    sizes = [{"strategy": "default", "status": "ok", "size_bytes": n, "step_ms": 1.0} for n in (10, 20)]
    assert catalog.BY_NAME["micro"].rows.plotted(sizes) == sizes[1:]
    assert catalog.BY_NAME["ddp"].rows.plotted(sizes) == sizes
    for w in catalog.WORKLOADS:
        row = w.rows.table_row({"strategy": "shape", "status": "n/a: needs CUDA and NCCL"})
        assert len(row) == len(w.rows.columns) and row[w.rows.status_column] == "n/a: needs CUDA and NCCL"
    assert launcher.compare([{"workload": "micro", "strategy": "default", "status": "ok",
                              "wrong": 1}])["micro"]["match"] is False


def test_every_workload_has_its_builder():
    pytest.importorskip("torch")
    from ccoverlap.bench import workloads

    assert all(callable(getattr(workloads, w.name, None)) for w in catalog.WORKLOADS)


def test_comm_table():
    assert comms.valid() == "nccl (GPUs), gloo (CPU) or emulate (one process)"
    cfg = BenchConfig(workloads=("ddp",), device="cpu", comm="emulate", emulate_world=4).resolved(gpus=0).validate()
    assert (cfg.nproc, cfg.world, cfg.backend) == (1, 4, "ccov_emulate")
    env = launcher.rank_launch(levers.strategy("shape"), "/tmp").environ({})
    # the emulation's proxy, comm_paced, is communication to every tool (model/comm.py)
    assert env["CCOVERLAP_COMM"] == ""
    assert [comms.auto("cpu", None, 0), comms.auto("cuda", None, 1), comms.auto("cuda", None, 4),
            comms.auto("cuda", 1, 4)] == ["gloo", "emulate", "nccl", "emulate"]


def test_no_workload_or_comm_is_special_cased_outside_its_table():
    bench = Path(catalog.__file__).parent
    files = [p for p in bench.glob("*.py") if p.name not in ("catalog.py", "comms.py")] + [Path(cli_bench.__file__)]
    branch = re.compile(r'[!=]=\s*"(micro|emulate|nccl|gloo)"|"(micro|emulate|nccl|gloo)"\s*[!=]=')
    found = [f"{p.name}:{i}" for p in files for i, line in enumerate(p.read_text().splitlines(), 1)
             if branch.search(line)]
    assert found == []


@pytest.mark.parametrize("argv", [["bench", "--nproc", "x"], ["bench", "--busbw", "fast"], ["lab", "--reps", "x"]])
def test_a_value_of_the_wrong_type_is_one_line_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and f"argument {argv[1]}: invalid" in err


@pytest.mark.parametrize("argv", [
    ["analyze", ".", "--report", ""], ["analyze", ".", "--perfetto", ""], ["analyze", ""], ["example", ""],
    ["bench", "--json", ""], ["levers", "--json", ""], ["whatif", ".", "--plot", ""],
    ["doctor", "--out", "", "--", "true"], ["doctor", "--report", "", "--", "true"],
    ["tune", "--out", "", "--", "true"], ["tune", "--json", "", "--", "true"],
    ["tune", "--policy-out", "", "--", "true"],
], ids=" ".join)
def test_an_empty_path_is_refused_in_one_line_before_any_work(argv, capsys, tmp_path, monkeypatch):
    """'' is not the current folder (Path('') is): a report or a capture is never written there by accident."""
    from ccoverlap.cli import main

    monkeypatch.chdir(tmp_path)
    try:
        code = main(argv)
    except SystemExit as exc:  # refused by argparse, at parse time
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and ("give a path" in err), err
    assert list(tmp_path.iterdir()) == []
