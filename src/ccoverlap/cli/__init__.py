"""The `ccoverlap` command: one module per subcommand, each with register() and run()."""
from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from ccoverlap.control.procs import Stopped, exit_for, stop_on_signals
from ccoverlap.util import lifetime
from ccoverlap.util.errors import UsageError
from ccoverlap.util.options import Parser
from ccoverlap.util.output import STDOUT, STDOUT_NAME, OutputError, guarded_stdout, json_on_stdout

from ccoverlap import __version__

#: The subcommands in --help's order, each its module's name here.
COMMANDS = ("bench", "info", "levers", "occupancy", "plan", "lab", "run", "interposer", "analyze", "doctor", "whatif",
            "tune", "example")

DESCRIPTION = """\
ccoverlap makes computation and collective communication overlap on GPUs.
NCCL kernels launched beside compute often wait until compute blocks drain an
SM. ccoverlap plans how much to shape compute (extra dynamic shared memory per
block, so fewer blocks are resident) against the real footprint of the
communication kernel, and says when shaping cannot work and what would.

Start with:
  ccoverlap bench                     every workload under every strategy, on what is here
  ccoverlap info                      what one SM of this GPU offers
  ccoverlap levers                    every runtime lever and whether it applies here
  ccoverlap plan --device h200 --compute threads=256,regs=32 --comm nccl
  ccoverlap lab --quick               one GPU: every strategy side by side
  ccoverlap run --mode auto -- torchrun ...   shape an unmodified program
  ccoverlap doctor -- torchrun ...            profile an unmodified program: why is communication exposed?
  ccoverlap whatif DIR                        predict each lever's effect from that capture (here, on other GPUs)
  ccoverlap tune -- torchrun ...              find its fastest levers; keep them only if faster beyond noise, \
same result
  ccoverlap run --config policy.json -- torchrun ...   apply what tune found
  ccoverlap example ex                        a recorded H200 capture to try analyze and whatif on
"""




def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every subcommand, or of `only` where it names one: then only its module is imported (the
    other subcommands' imports took 0.1 s of the 0.22 s `ccoverlap analyze` spent importing, measured)."""
    parser = Parser(
        prog="ccoverlap", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"ccoverlap {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name in (only,) if only in COMMANDS else COMMANDS:
        import_module(f"{__name__}.{name}").register(sub)
    return parser


def entry() -> None:
    """The `ccoverlap` program (python -m ccoverlap, the installed script): main(), then its end
    (util/lifetime.leave: at once, by os._exit, where the command allows, else sys.exit)."""
    lifetime.program()
    lifetime.leave(main())


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input is one line and exit 2, a file or standard output that cannot be written
    (a full disk, a closed pipe: util/output.OutputError) one line naming it and the errno, exit 1. SIGINT,
    SIGTERM and SIGHUP unwind it (control/procs.Stopped: a temporary output removed, workers stopped) before it
    exits 130 (SIGINT) or dies of the signal."""
    prog = "ccoverlap"
    try:
        with guarded_stdout(), stop_on_signals():  # --help on a full device too
            given = sys.argv[1:] if argv is None else argv
            args = build_parser(given[0] if given else None).parse_args(given)
            prog = f"ccoverlap {args.command}"
            args.cli_argv = list(given)  # for commands that re-run themselves
            with json_on_stdout(getattr(args, "json", None) == STDOUT):
                code = args.run(args) or 0
            sys.stdout.flush()  # a full device or a closed pipe shows here, not in the interpreter's last flush
            return code
    except OutputError as exc:
        if exc.path == STDOUT_NAME:
            _stdout_to_devnull()
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except Stopped as exc:
        return exit_for(exc.signum)


def _stdout_to_devnull() -> None:
    """Point stdout's file descriptor at the null device, so what is still buffered goes nowhere, quietly,
    at exit (opened for writing, as any program writes to it: the device is not replaced)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (captured): nothing will be flushed to a pipe
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
