"""What `ccoverlap levers` and `interposer` take (a field with help is a CLI option: util/options.py)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LeversConfig:
    strategy: str | None = field(default=None, metadata={
        "metavar": "COMBO", "help": "check a combination and print the environment, interposer policy and start-up "
        "calls it sets"})
    json: str | None = field(default=None, metadata={
        "metavar": "PATH", "help": "write JSON to PATH instead of the table (-: standard output)"})


@dataclass(frozen=True)
class InterposerConfig:
    path: bool = field(default=False, metadata={"help": "print only the library path"})
