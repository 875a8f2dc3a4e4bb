"""`ccoverlap example`: write a recorded GPU capture shipped in the package, and say what to try on it."""
from __future__ import annotations

import argparse
import json

from ccoverlap import examples
from ccoverlap.util.options import add_subcommand, path_arg
from ccoverlap.util.output import check_new_folder, open_folder

EPILOG = """\
The capture is ccoverlap's known-answer case 'dispatch', recorded by `ccoverlap
doctor` on an NVIDIA H200 (PROVENANCE.txt in DIR says with what): a fat compute
grid queued ahead of an all-reduce at the same stream priority, whose answer is
the lever priority. No GPU is needed to analyse it. See docs/example.md.

examples:
  ccoverlap example ex && ccoverlap analyze ex --report ex-report.html --perfetto ex-perfetto.json
"""


def register(sub) -> None:
    p = add_subcommand(
        sub, "example", run, help="write a recorded GPU capture (H200) to try analyze and whatif on, no GPU needed",
        description="Write a small GPU capture shipped inside ccoverlap into DIR (a new or empty folder) and "
        "print the commands to try on it.", epilog=EPILOG)
    # its one argument, a positional: add_options makes options only, so `example` has no config dataclass
    p.add_argument("dir", type=path_arg, metavar="DIR", help="new or empty folder to write the capture into")


def run(args: argparse.Namespace) -> int:
    dest = check_new_folder(args.dir, "DIR")
    with open_folder(dest) as tmp:
        written = examples.write(tmp)
    recorded = json.loads((dest / examples.PROVENANCE).read_text())["recorded_by"]
    print(f"wrote {len(written)} files to {args.dir}: a capture by ccoverlap doctor on an {recorded['gpu']} "
          f"(torch {recorded['torch']}, NCCL {recorded['nccl']}, {recorded['date'][:10]}); see {examples.PROVENANCE}")
    print("try:")
    for what, command in examples.commands(args.dir):
        print(f"  {command}\n      # {what}")
    return 0
