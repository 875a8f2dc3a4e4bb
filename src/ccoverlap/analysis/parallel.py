"""The first passes of `analyze` in worker processes: one a core, each reading and analysing one file at a time.

A worker returns a compact Part (no trace model), so memory grows with the
workers, not with the files; the parts come back in the files' order.
"""
from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def run(fn: Callable[[T], R], tasks: list[T], jobs: int, progress: Callable[[R], None] | None = None) -> list[R]:
    """fn over tasks in `jobs` processes (forked: the parent's imports come along), results in the tasks' order;
    `progress` is called in this process as each one ends."""
    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    results: list = [None] * len(tasks)
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)) or 1, mp_context=context) as pool:
        futures = {pool.submit(fn, task): i for i, task in enumerate(tasks)}
        for future in as_completed(futures):
            results[futures[future]] = result = future.result()
            if progress:
                progress(result)
    return results
