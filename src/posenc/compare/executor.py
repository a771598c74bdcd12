"""The executor seam: how a grid of independent run specs gets executed.

The whole interface is one method::

    executor.map(fn, specs, progress) -> iterator of (spec, payload | exception)

``fn(spec, advance)`` is a picklable module-level function (in practice
:func:`posenc.compare.work.execute`), ``advance(units)`` reports progress
(``advance(0, status)`` a held-out check, for the display), and
results are yielded *as each run finishes*, so the caller can write each record
at once. An executor never writes records itself and never decides what to
skip; it only runs what it is given. A Ray executor is the same ~30 lines with
``ray.remote(fn)`` and ``ray.wait`` (progress may be coarser: ``advance`` called
once per finished run).
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any, Protocol

from posenc.compare.ray_executor import RayExecutor
from posenc.core.checks import check_choice, check_int
from posenc.records.spec import RunSpec

WorkFn = Callable[[RunSpec, Callable[..., None]], dict]
ProgressFn = Callable[..., None]  # (spec, units advanced[, status of a held-out check])
Outcome = tuple[RunSpec, "dict[str, Any] | BaseException"]


def max_threads() -> int:
    """The most torch threads a run may ask for: 4 per core (more only oversubscribes the CPU;
    ``--threads 10000`` made a run ~60x slower)."""
    return 4 * (os.cpu_count() or 1)


class Executor(Protocol):
    def map(self, fn: WorkFn, specs: Sequence[RunSpec], progress: ProgressFn) -> Iterator[Outcome]: ...


class LocalExecutor:
    """Run specs in this process (``workers=1``) or in a pool of ``workers`` processes."""

    def __init__(self, workers: int = 1) -> None:
        self.workers = check_int("workers", workers, minimum=1)

    def map(self, fn: WorkFn, specs: Sequence[RunSpec], progress: ProgressFn) -> Iterator[Outcome]:
        if self.workers == 1 or len(specs) <= 1:
            yield from self._serial(fn, specs, progress)
        else:
            yield from self._pool(fn, specs, progress)

    @staticmethod
    def _serial(fn: WorkFn, specs: Sequence[RunSpec], progress: ProgressFn) -> Iterator[Outcome]:
        for spec in specs:
            try:
                result: dict[str, Any] | BaseException = fn(spec, functools.partial(progress, spec))
            except Exception as exc:  # a failed run is reported, the grid goes on
                result = exc
            yield spec, result

    def _pool(self, fn: WorkFn, specs: Sequence[RunSpec], progress: ProgressFn) -> Iterator[Outcome]:
        # "spawn": a fresh interpreter per worker (fork after torch has started threads can hang).
        context = mp.get_context("spawn")
        events = context.Queue()  # inherited by the workers through the pool initializer
        stop = threading.Event()
        by_index = dict(enumerate(specs))

        def drain() -> None:  # forward workers' progress events to the caller
            while not stop.is_set():
                try:
                    index, units, status = events.get(timeout=0.2)
                except (queue.Empty, EOFError, OSError):
                    continue
                if status is None:
                    progress(by_index[index], units)
                else:
                    progress(by_index[index], units, status)

        pump = threading.Thread(target=drain, daemon=True)
        pump.start()
        pool = ProcessPoolExecutor(
            self.workers, mp_context=context, initializer=_worker_init, initargs=(events, os.getpid())
        )
        try:
            futures = {pool.submit(_run_reporting, fn, spec, index): spec for index, spec in by_index.items()}
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    exc = future.exception()
                    yield futures[future], exc if exc is not None else future.result()
        except BaseException:  # Ctrl-C or the caller stopped early: do not wait for running work
            for process in list(getattr(pool, "_processes", {}).values()):  # no public API before 3.14
                process.terminate()
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            stop.set()
            pump.join(timeout=2)


_EVENTS: Any = None  # the progress queue, set in each worker by _worker_init


def _worker_init(events: Any, parent_pid: int) -> None:
    """Worker start-up: keep the progress queue; exit if the parent dies (SIGKILL leaves no orphans)."""
    global _EVENTS
    _EVENTS = events

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(0.5)

    threading.Thread(target=watch, daemon=True).start()


def _run_reporting(fn: WorkFn, spec: RunSpec, index: int) -> dict:
    """Worker side: run ``fn`` and batch progress events (at most ~one per 10 units; a held-out
    check's status goes at once)."""
    pending = [0]

    def advance(units: int, status: dict[str, Any] | None = None) -> None:
        pending[0] += units
        if pending[0] >= 10 or status is not None:
            _EVENTS.put((index, pending[0], status))
            pending[0] = 0

    try:
        return fn(spec, advance)
    finally:
        if pending[0]:
            _EVENTS.put((index, pending[0], None))


EXECUTORS = ("local", "ray")


def make_executor(name: str, *, workers: int = 1, address: str | None = None) -> Executor:
    """``--executor NAME``: ``local`` (this machine's processes) or ``ray`` (``address``:
    None = a private Ray here, "auto" = the running local cluster, "HOST:PORT" = a head node)."""
    check_choice("executor", name, EXECUTORS)
    if name == "ray":
        return RayExecutor(address, workers=workers)
    return LocalExecutor(workers)
