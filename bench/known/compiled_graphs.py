"""Known answer (j): compiled.py with torch.compile(mode="reduce-overhead"): the MLP replayed from CUDA graphs."""
import os
import runpy
from pathlib import Path

os.environ["KNOWN_COMPILE_MODE"] = "reduce-overhead"
runpy.run_path(str(Path(__file__).with_name("compiled.py")), run_name="__main__")
