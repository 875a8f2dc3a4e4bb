"""Builds the C occupancy core as a plain shared library that Python loads with ctypes.

It is compiled as a setuptools extension only so that pip builds it with the
system C compiler; it has no Python entry point and needs no CUDA toolkit.
"""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ccoverlap._occupancy",
            sources=["src/ccoverlap/csrc/occupancy.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra"],
        )
    ]
)
