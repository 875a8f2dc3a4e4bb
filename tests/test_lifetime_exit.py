"""The program's end at once (util/lifetime.leave): os._exit only after its streams are flushed and its atexit
handlers have run, the exit status kept; sys.exit where the command did not opt in, a thread still runs, or
outside the program's own process (a caller of cli.main holds nothing)."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from ccoverlap.util import lifetime

from test_interposer import clean_env


def _program(body: str, tmp_path) -> subprocess.CompletedProcess:
    code = textwrap.dedent(f"""
        import atexit, sys, threading, time
        from ccoverlap.util import lifetime
        lifetime.program()
        atexit.register(lambda: open({str(tmp_path / 'atexit')!r}, 'w').write('ran'))
        sys.stdout.write('buffered out')
        sys.stderr.write('err')
    """) + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True, text=True)


def test_at_once_flushes_runs_atexit_and_keeps_the_code(tmp_path):
    out = _program("""
        lifetime.at_once()
        class Freed:
            def __del__(self):
                sys.stderr.write(' freed at teardown')
        lifetime.keep(Freed())  # never freed: the process ends without its teardown
        lifetime.leave(3)
        raise SystemExit('not reached')
    """, tmp_path)
    assert (out.returncode, out.stdout, out.stderr) == (3, "buffered out", "err")
    assert (tmp_path / "atexit").read_text() == "ran"


def test_no_opt_in_or_a_thread_is_an_ordinary_exit(tmp_path):
    for body in ("lifetime.leave(4)",
                 "lifetime.at_once()\nthreading.Thread(target=time.sleep, args=(0.2,)).start()\nlifetime.leave(4)"):
        out = _program(body, tmp_path)
        assert (out.returncode, out.stdout, out.stderr) == (4, "buffered out", "err")
        assert (tmp_path / "atexit").read_text() == "ran"
        (tmp_path / "atexit").unlink()


def test_outside_the_program_nothing_is_held():
    lifetime.at_once()
    lifetime.keep(object())
    assert lifetime._held == [] and not lifetime._at_once
