"""Builds the C core (occupancy arithmetic, the interposer's policy parser and what a communication
kernel is, a JSON depth scan for the trace reader; loaded by Python with ctypes) and the launch interposer.

Both are compiled as setuptools extensions only so that pip builds them with the
system C compiler; they have no Python entry point and need no CUDA toolkit. The
interposer is an LD_PRELOAD library (`ccoverlap run`), never loaded into Python;
it compiles occupancy.c and policy.c in, so its pads are the planner's arithmetic and its
policy is read by the same parser that `ccoverlap run` validates with.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ccoverlap._occupancy",
            sources=[f"src/ccoverlap/csrc/{name}.c" for name in ("occupancy", "policy", "jsonscan")],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
        ),
        Extension(
            "ccoverlap._interposer",
            sources=[f"src/ccoverlap/csrc/{name}.c"
                     for name in ("interposer", "interposer_cuda", "interposer_hip", "occupancy", "policy")],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-fvisibility=hidden"],
            libraries=["dl", "pthread"],
        ),
    ]
)
