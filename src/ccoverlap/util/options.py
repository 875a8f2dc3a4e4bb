"""argparse options from a config dataclass, and the dataclass back from what was parsed, so a
default, a flag and its help are declared once: in the dataclass.

A field whose metadata has "help" is an option. Its flag is `--field-name` unless "flag" says
otherwise; argparse reads its value as its default's type (int, float, text; a tuple default takes
comma-separated items; with "append" the option repeats, one item each) unless "type" says, then "parse", where given,
converts it when the config is built (so that its UsageError is one line, exit 2, from the command); its help ends with
its default ("shown" words one the code settles later) and the value each preset gives it; with "required" it must
be given. A field holding a
dataclass (the bench's model size) contributes that dataclass's fields. Presets are named
overrides of the defaults; options given on the command line win over them.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ccoverlap.util.output import comma_list

GIVEN = "_given"  # namespace attribute: the options given on the command line (presets yield to them)
#: --json of the commands that print a table (info, levers, occupancy, plan)
JSON_HELP = "write JSON to PATH instead of the table (-: standard output)"


def _leaves(obj, prefix: str = "") -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted path, field, value) of every field of a dataclass instance, nested ones flattened."""
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            yield from _leaves(value, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, f, value


def _flat(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides by dotted path: a dataclass value stands for all its fields."""
    out = {}
    for name, value in overrides.items():
        out |= ({path: v for path, _, v in _leaves(value, f"{name}.")} if dataclasses.is_dataclass(value)
                else {name: value})
    return out


def _rebuild(template, flat: Mapping[str, Any], prefix: str = ""):
    kw = {}
    for f in dataclasses.fields(template):
        value = getattr(template, f.name)
        path = prefix + f.name
        kw[f.name] = _rebuild(value, flat, f"{path}.") if dataclasses.is_dataclass(value) else flat[path]
    return type(template)(**kw)


def options(cls: type) -> Iterator[tuple[str, dataclasses.Field, Any]]:
    """(dotted path, field, default) of every field of `cls` that is an option."""
    return ((path, f, v) for path, f, v in _leaves(cls()) if "help" in f.metadata)


def _show(value) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return format(value, "g") if isinstance(value, float) else str(value)


def _parser(default, meta: Mapping[str, Any]) -> Callable[[str], Any]:
    if "type" in meta:
        return meta["type"]
    if isinstance(default, tuple):
        return comma_list
    return type(default) if isinstance(default, (int, float)) else str


def flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


class _Given(argparse.Action):
    """Store the value and note that the option was given (presets yield to it)."""

    def __call__(self, parser, namespace, value, option_string=None):
        setattr(namespace, self.dest, value)
        setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {self.dest})


class _Flag(_Given):
    """A bool field (default False): the flag alone turns it on."""

    def __init__(self, option_strings, dest, **kw):
        kw.pop("type", None)
        kw.pop("metavar", None)
        super().__init__(option_strings, dest, nargs=0, **kw)

    def __call__(self, parser, namespace, value, option_string=None):
        super().__call__(parser, namespace, True, option_string)


class _Appended(_Given):
    """A repeatable option (metadata "append"): each use adds one item to the tuple."""

    def __call__(self, parser, namespace, value, option_string=None):
        given = self.dest in getattr(namespace, GIVEN, ())
        super().__call__(parser, namespace, (getattr(namespace, self.dest) if given else ()) + (value,), option_string)


def add_options(parser: argparse.ArgumentParser, cls: type,
                presets: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """One option per field of `cls` with help; its default is the dataclass's, its help names it and
    what each preset (label: overrides) makes of it."""
    flats = {label: _flat(p) for label, p in (presets or {}).items()}
    for path, f, default in options(cls):
        meta = f.metadata
        by_value: dict[str, list[str]] = {}
        for label, flat in flats.items():
            if path in flat and flat[path] != default:
                by_value.setdefault(_show(flat[path]), []).append(label)
        shown = ([f"default: {meta.get('shown') or _show(default)}"] if default is not None or "shown" in meta else [])
        shown += [f"{', '.join(labels)}: {value}" for value, labels in by_value.items()]
        text = meta["help"] + (f" ({'; '.join(shown)})" if shown else "")
        append = meta.get("append", False)
        if isinstance(default, bool):
            text = meta["help"]
        parser.add_argument(flag(f), dest=path, default=default,
                            action=_Flag if isinstance(default, bool) else _Appended if append else _Given,
                            type=str if append else _parser(default, meta),
                            metavar=meta.get("metavar") or flag(f)[2:].upper().replace("-", "_"),
                            required=meta.get("required", False),
                            help=text.replace("%", "%%"))


def add_preset(parser: argparse.ArgumentParser, name: str, cls: type, overrides: Mapping[str, Any], what: str) -> None:
    """A flag that applies `overrides` (its help lists them as the options they set)."""
    flags = {path: flag(f) for path, f, _ in options(cls)}
    listed = " ".join(f"{flags[p]} {_show(v)}" if p in flags else f"{p}={_show(v)}"
                      for p, v in _flat(overrides).items())
    parser.add_argument(name, action="store_true", help=f"{what}: {listed}; options given win".replace("%", "%%"))


def from_args(cls: type, args: argparse.Namespace, *presets: Mapping[str, Any]):
    """`cls` from its defaults, then each preset in turn, then the options given on the command line."""
    defaults = cls()
    flat = {path: value for path, _, value in _leaves(defaults)}
    for preset in presets:
        flat |= _flat(preset)
    parse = {path: f.metadata["parse"] for path, f, _ in options(cls) if "parse" in f.metadata}
    for path in getattr(args, GIVEN, ()):
        value = getattr(args, path)
        flat[path] = parse[path](value) if path in parse else value
    return _rebuild(defaults, flat)


def path_arg(text: str) -> Path:
    """An argparse type for a file or folder: '' is refused at parse time (Path('') would be the current
    folder, and a report written there)."""
    if not text:
        raise argparse.ArgumentTypeError("empty: give a path")
    return Path(text)


@dataclasses.dataclass(frozen=True)
class Outputs:
    """What every command that writes files takes (util/output.check_outputs reads it)."""

    force: bool = dataclasses.field(default=False, metadata={
        "help": "replace a read-only output file (never an input, a device or a FIFO: those are refused or "
        "written in place)"})


def add_subcommand(sub, name: str, run: Callable, *, help: str, description: str,
                   epilog: str | None = None) -> argparse.ArgumentParser:
    """Subcommand `name` of `sub`, running `run`; its epilog (examples, notes) is shown as written. The caller adds
    its options (add_options), in the order --help lists them."""
    p = sub.add_parser(name, help=help, description=description, epilog=epilog,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(run=run)
    return p


def add_command(sub, name: str, cls: type, run: Callable, *, help: str, description: str, epilog: str,
                what: str) -> argparse.ArgumentParser:
    """A subcommand that wraps a user's command (`ccoverlap NAME [options] -- CMD`): its options from `cls`,
    then CMD; `what` says what CMD is to it, for --help."""
    p = add_subcommand(sub, name, run, help=help, description=description, epilog=epilog)
    add_options(p, cls)
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS", help=what)
    return p


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input in one line (exit 2) instead of usage + error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")

    def _print_message(self, message: str, file=None) -> None:
        """--help and --version: a failed write (a full device) is util/output's one line, not swallowed."""
        if message:
            (file or sys.stdout).write(message)
