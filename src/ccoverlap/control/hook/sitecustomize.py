"""ccoverlap's start-up hook (`ccoverlap run --strategy` and `ccoverlap doctor` put this folder first on
PYTHONPATH): runs the jobs asked for (start-up levers, the doctor's capture) as torch is imported
(ccoverlap/control/startup.py), then runs the sitecustomize this one shadows, the next on sys.path (a user's, or
the distribution's), so that it still runs."""
import importlib.machinery
import importlib.util
import os
import sys


def _install() -> None:
    try:  # in a function: an environment where ccoverlap is not importable gets one line, and the program runs
        from ccoverlap.control import startup
    except ImportError as exc:
        print(f"ccoverlap: the start-up hook did nothing in pid {os.getpid()} ({sys.executable}): "
              f"ccoverlap is not importable there ({exc})", file=sys.stderr)
        return
    startup.install()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_install()
_chain()
