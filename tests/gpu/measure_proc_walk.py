"""On a GPU node: how many processes /proc shows (kernel threads among them), and what the
probe's process walks cost there: the whole scan against the children files, and discovery.

    python3 tests/gpu/measure_proc_walk.py [ROOT_PID]

Prints one JSON line. ROOT_PID defaults to this process's parent (a shell with a few
children). Medians of 7.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from hangdoctor.collect import processes, procfs  # noqa: E402


def median_ms(fn, n: int = 7) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 2)


def main() -> None:
    root = int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid()
    scan_tree = procfs.descendants(root, procfs.children_map())
    files_tree = procfs.process_tree(root)
    print(json.dumps({
        "processes": len(procfs.list_pids()),
        "kernel_threads": len(processes.kernel_threads()),
        "cpus": os.cpu_count(),
        "root": root,
        "tree_size": len(scan_tree),
        "trees_agree": scan_tree == files_tree,
        "whole_scan_ms": median_ms(lambda: procfs.descendants(root, procfs.children_map())),
        "children_files_ms": median_ms(lambda: procfs.process_tree(root)),
        "discover_ms": median_ms(lambda: processes.discover("/proc", [os.getpid()])),
        "discover_reading_kernel_threads_too_ms": median_ms(_discover_without_skip),
    }))


def _discover_without_skip() -> None:
    saved = processes.kernel_threads
    processes.kernel_threads = lambda proc="/proc": set()
    try:
        processes.discover("/proc", [os.getpid()])
    finally:
        processes.kernel_threads = saved


if __name__ == "__main__":
    main()
