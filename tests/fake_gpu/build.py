"""Build the fake libcuda.so.1, the fake libamdhip64.so and the launcher into one directory."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).parent


def build(out: Path) -> Path:
    """Compile everything into `out` with the system C compiler; returns the launcher's path. The launcher finds
    the fakes by DT_RPATH, which the loader searches before LD_LIBRARY_PATH (DT_RUNPATH comes after it): on a
    machine whose LD_LIBRARY_PATH holds the real libcuda.so.1 (a GPU host) it still loads the fake."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise FileNotFoundError("no C compiler (cc or gcc) on PATH")
    flags = ["-O2", "-Wall", "-Werror", "-std=gnu11", f"-I{HERE}"]
    subprocess.run([cc, *flags, "-fPIC", "-shared", "-Wl,-soname,libcuda.so.1", "-o", out / "libcuda.so.1",
                    HERE / "fake_cuda.c"], check=True)
    if not (out / "libcuda.so").exists():
        (out / "libcuda.so").symlink_to("libcuda.so.1")
    subprocess.run([cc, *flags, "-fPIC", "-shared", "-Wl,-soname,libamdhip64.so", "-o", out / "libamdhip64.so",
                    HERE / "fake_hip.c"], check=True)
    subprocess.run([cc, *flags, "-o", out / "launcher", HERE / "launcher.c", f"-L{out}", "-lcuda", "-lamdhip64",
                    "-ldl", "-lpthread", "-Wl,--disable-new-dtags", f"-Wl,-rpath,{out}"], check=True)
    return out / "launcher"
