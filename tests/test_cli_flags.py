"""Every subcommand's flags against a snapshot (issue 34.3): names, defaults, choices and the first line of their
help, so a flag changes only on purpose. After a deliberate change, write the snapshot again with
`python tests/test_cli_flags.py` and commit tests/data/cli_flags.json with the change."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ccoverlap.cli import build_parser

SNAPSHOT = Path(__file__).parent / "data" / "cli_flags.json"


def _default(value):
    return value if value is None or isinstance(value, bool | int | float | str) else repr(value)


def flags() -> dict[str, list[dict]]:
    """command -> its arguments (positionals and options) as argparse holds them, in the order --help shows."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {}
    for name, command in sub.choices.items():
        out[name] = [{"flags": a.option_strings or [a.dest], "default": _default(a.default),
                      "nargs": a.nargs, "choices": sorted(map(str, a.choices)) if a.choices else None,
                      "help": (a.help or "").split("\n")[0].split(". ")[0]}
                     for a in command._actions if not isinstance(a, argparse._HelpAction)]
    return out


def changed(want: dict[str, list[dict]], got: dict[str, list[dict]]) -> list[str]:
    """The subcommands whose flags differ from the snapshot (one came or went: its name)."""
    return sorted(name for name in want.keys() | got.keys() if want.get(name) != got.get(name))


def test_every_subcommand_s_flags_are_the_snapshot():
    assert SNAPSHOT.exists(), "no snapshot: write it with `python tests/test_cli_flags.py`"
    assert changed(json.loads(SNAPSHOT.read_text()), flags()) == [], (
        "these subcommands' flags changed: if on purpose, write the snapshot again (python tests/test_cli_flags.py)")


def test_the_comparison_sees_a_changed_default_and_a_new_flag():
    got = flags()
    moved = json.loads(json.dumps(got))
    moved["analyze"][-1]["default"] = "elsewhere"
    moved["levers"].append({"flags": ["--new"], "default": None, "nargs": None, "choices": None, "help": ""})
    assert changed(got, moved) == ["analyze", "levers"] and changed(got, got) == []


if __name__ == "__main__":
    SNAPSHOT.write_text(json.dumps(flags(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {SNAPSHOT}", file=sys.stderr)
