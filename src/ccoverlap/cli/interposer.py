"""`ccoverlap interposer`: where the launch interposer library is, and the policy it would read here."""
from __future__ import annotations

import argparse
import os

from ccoverlap.control.config import InterposerConfig
from ccoverlap.control.interposer import Policy, library_path

from ccoverlap.util.options import add_options, add_subcommand, from_args
from ccoverlap.util.output import print_json


def register(sub) -> None:
    p = add_subcommand(
        sub, "interposer", run,
        help="print the launch interposer's library path, or the policy it would read from this environment",
        description="The launch interposer is a C library preloaded into a program (LD_PRELOAD) that adds "
        "the planned dynamic shared memory to every compute kernel launch. `ccoverlap run` preloads it for "
        "you; --path prints it for preloading by hand. Without --path, print the library path and the "
        "policy read (and validated) from CCOVERLAP_* variables and CCOVERLAP_POLICY, as JSON.",
    )
    add_options(p, InterposerConfig)


def run(args: argparse.Namespace) -> int:
    if from_args(InterposerConfig, args).path:
        print(library_path())
        return 0
    print_json({"library": library_path(), "policy": vars(Policy.from_environ(os.environ))})
    return 0
