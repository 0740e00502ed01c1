"""The bulk calls run their C++ work without the GIL: another Python thread keeps
running meanwhile. Holding the GIL through the call would stop it completely."""

from __future__ import annotations

import random
import threading
import time
from typing import Callable

import gpushare as gs


def other_thread_progress(call: Callable[[], object]) -> tuple[int, float]:
    """Runs `call` in a thread while this thread counts loop iterations.

    Returns the iterations made in the middle half of the call (when a bulk
    call is in its C++ part, not converting arguments or results) and the
    call's duration in seconds.
    """
    window: list[float] = []
    done = threading.Event()

    def run() -> None:
        window.append(time.perf_counter())
        call()
        window.append(time.perf_counter())
        done.set()

    stamps: list[float] = []
    worker = threading.Thread(target=run)
    worker.start()
    while not done.is_set():
        stamps.append(time.perf_counter())
    worker.join()
    start, end = window
    lo, hi = start + 0.25 * (end - start), start + 0.75 * (end - start)
    return sum(lo <= t <= hi for t in stamps), end - start


def big_cluster() -> gs.Cluster:
    c = gs.Cluster()
    for i in range(1000):
        c.add_node(f"node-{i}", gpus=[32] * 8, labels={"gpushare": "true"})
    return c


def test_place_many_and_release_many_let_other_threads_run() -> None:
    c = big_cluster()
    requests = [gs.Request(f"r{i}", gpu_memory=1 + i % 4) for i in range(100_000)]
    ids = [r.id for r in requests]
    progress, seconds = other_thread_progress(lambda: c.place_many(requests))
    assert c.num_placements == len(requests)
    assert progress > 0, f"no Python ran during {seconds:.3f} s of place_many"
    progress, seconds = other_thread_progress(lambda: c.release_many(ids))
    assert c.num_placements == 0
    assert progress > 0, f"no Python ran during {seconds:.3f} s of release_many"


def test_the_measure_sees_a_call_that_holds_the_gil() -> None:
    # sorted() of a long list of ints holds the GIL throughout, like a binding
    # that forgot to release it: the other thread makes no progress at all.
    data = list(range(1_000_000))
    random.Random(1).shuffle(data)
    progress, seconds = other_thread_progress(lambda: sorted(data))
    assert progress == 0, f"{progress} iterations during {seconds:.3f} s of sorted()"
