"""ccoverlap's start-up hook (`ccoverlap run --strategy` puts this folder first on PYTHONPATH): makes the
strategy's start-up calls as torch is imported (ccoverlap/startup.py), then runs the sitecustomize this
one shadows, the next on sys.path (a user's, or the distribution's), so that it still runs."""
import importlib.machinery
import importlib.util
import os
import sys


def _install() -> None:
    try:
        from ccoverlap import startup
    except ImportError as exc:
        print(f"ccoverlap: start-up levers {os.environ.get('CCOVERLAP_STARTUP')} not applied in pid {os.getpid()} "
              f"({sys.executable}): ccoverlap is not importable there ({exc})", file=sys.stderr)
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
