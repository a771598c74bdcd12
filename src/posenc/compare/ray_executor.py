"""Run a benchmark grid on a Ray cluster: ``posenc compare --executor ray``.

The same seam as :class:`~posenc.compare.executor.LocalExecutor`::

    RayExecutor(address).map(fn, specs, progress) -> iterator of (spec, payload | exception)

Each :class:`~posenc.records.spec.RunSpec` becomes one Ray task that asks for
``spec.threads`` CPUs (1 by default), so Ray never packs more runs onto a node
than it has cores. A task whose worker process dies (OOM killer, SIGKILL, a
lost node) is resubmitted by Ray up to ``max_retries`` times; an exception
raised *by the run* is not retried (it would fail again) and is yielded like
the local executor does. Results are yielded in the order runs finish
(``ray.wait``), so the caller writes each record on the driver at once: the
executor never writes records and never decides what to skip, so resuming,
redoing corrupt records and the output layout are exactly those of a local run.

Where Ray runs (``address``):

- ``None`` (the default): ``$RAY_ADDRESS`` if set, otherwise a private Ray on
  this machine with ``workers`` CPUs, addressed as 127.0.0.1 (its traffic stays
  on loopback), stopped afterwards;
- ``"auto"``: the cluster already running on this machine (``ray start --head``);
- ``"HOST:PORT"``: the head node of a cluster (the GCS port, 6379 by default).

If Ray is already initialised in this process (``ray.init`` by the caller), it
is used as is and left running.

Progress is per run: the caller's bar advances by a run's work units when it
finishes (the runner tops every finished run up to its full estimate).

GPUs (``--device cuda``): each run asks Ray for ``1 / workers`` of a GPU, so ``workers`` runs
share one GPU, and computes on the GPU Ray gives it (Ray sets ``CUDA_VISIBLE_DEVICES`` for the
task, so the run's device is ``cuda``; an index given with ``--device cuda:N`` is Ray's to
choose). Not run here: this machine has no GPU (docs/your-encoding.md says what was run where).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.records.spec import RunSpec

WorkFn = Callable[[RunSpec, Callable[..., None]], dict]
ProgressFn = Callable[..., None]
Outcome = tuple[RunSpec, "dict[str, Any] | BaseException"]

INSTALL_HINT = "--executor ray needs Ray, which is not installed: pip install 'posenc[ray]'"
LOCAL_HOST = "127.0.0.1"  # node address of a private Ray (Ray still listens on all interfaces)
OBJECT_STORE_BYTES = 256 * 2**20  # results are small JSON-ready dicts


class RayNotInstalled(PosencError, ImportError):
    """``--executor ray`` without Ray installed (bad input, as the command line shows it: one line)."""


def require_ray() -> Any:
    """Import and return :mod:`ray`, or raise :class:`RayNotInstalled` with the install command."""
    try:
        import ray
    except ImportError:
        raise RayNotInstalled(INSTALL_HINT) from None
    return ray


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a wrong ``HOST:PORT`` (``ray.init`` would retry for minutes)."""
    if "://" in address:  # ray://HOST:PORT (Ray Client) and friends: leave them to Ray
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise PosencError(f"address must be 'auto' or 'HOST:PORT', got {address!r}")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        raise ConnectionError(
            f"no Ray head at --address {address} ({exc.strerror or exc}); "
            "start one there with `ray start --head --port PORT`"
        ) from None


def _noop(_: int, status: Any = None) -> None:
    pass


def _run_one(fn: WorkFn, spec: RunSpec) -> dict[str, Any]:
    """Worker side: one run (progress is reported by the driver when it finishes); a CUDA run
    computes on the GPU Ray assigned (the only one it sees: ``cuda``)."""
    if spec.device.startswith("cuda"):
        spec = dataclasses.replace(spec, device="cuda")
    return fn(spec, _noop)


class RayExecutor:
    """Run each spec as a Ray task; yield results as they finish.

    Args:
        address: ``None`` | ``"auto"`` | ``"HOST:PORT"`` (see the module docstring).
        workers: CPUs of the private Ray started when there is no address (ignored when
            attaching to a cluster: its nodes' CPUs decide how many runs go at once).
        max_retries: how often a run whose worker died is resubmitted.
        num_cpus: CPUs each run asks for; default ``spec.threads`` (torch threads per run).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        workers: int = 1,
        max_retries: int = 3,
        num_cpus: int | None = None,
    ) -> None:
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise PosencError(f"address must be None, 'auto' or 'HOST:PORT', got {address!r}")
        # --address, else $RAY_ADDRESS (Ray's own convention), else None: a private Ray here.
        self.address = (address.strip() if address is not None else os.environ.get("RAY_ADDRESS")) or None
        self.workers = check_int("workers", workers, minimum=1)
        self.max_retries = check_int("max_retries", max_retries, minimum=0)
        self.num_cpus = None if num_cpus is None else check_int("num_cpus", num_cpus, minimum=1)
        self._ray = require_ray()  # fail before any work is planned
        if self.address not in (None, "auto", "local"):
            check_reachable(self.address)

    # -- connection ---------------------------------------------------------------------------

    def _connect(self, cpus_per_run: int) -> bool:
        """Start or attach to Ray; return whether :meth:`map` must shut it down afterwards."""
        ray = self._ray
        if ray.is_initialized():
            return False
        address = self.address
        options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
        if address in (None, "local"):
            options.update(
                address="local",
                num_cpus=self.workers * cpus_per_run,  # room for `workers` runs at once
                include_dashboard=False,
                object_store_memory=OBJECT_STORE_BYTES,
                _node_ip_address=LOCAL_HOST,
            )
        else:
            options["address"] = address
        try:
            ray.init(**options)
        except ConnectionError as exc:
            raise ConnectionError(
                f"could not join the Ray cluster at --address {address} ({exc}); start one with "
                "`ray start --head`, or leave --address out to run a private Ray on this machine; "
                "if the head uses token authentication, set RAY_AUTH_MODE=token and its RAY_AUTH_TOKEN here"
            ) from None
        return True

    # -- the seam -----------------------------------------------------------------------------

    def map(self, fn: WorkFn, specs: Sequence[RunSpec], progress: ProgressFn) -> Iterator[Outcome]:
        if not specs:
            return
        ray = self._ray
        cpus = {spec.run_id: self.num_cpus or max(1, spec.threads) for spec in specs}
        owned = self._connect(max(cpus.values()))
        remote = ray.remote(_run_one)
        pending: dict[Any, RunSpec] = {}
        try:
            for spec in specs:
                options: dict[str, Any] = {"num_cpus": cpus[spec.run_id], "max_retries": self.max_retries}
                if spec.device.startswith("cuda"):
                    options["num_gpus"] = 1 / self.workers  # `workers` runs share one GPU
                ref = remote.options(**options).remote(fn, spec)
                pending[ref] = spec
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    spec = pending.pop(ref)
                    result = self._result(ref)
                    progress(spec, spec.work_units())
                    yield spec, result
        finally:  # Ctrl-C or the caller stopped early: do not leave runs behind
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already finished or its node is gone
                    pass
            if owned:
                ray.shutdown()

    def _result(self, ref: Any) -> dict[str, Any] | BaseException:
        """The payload, the run's own exception, or Ray's (worker died after every retry, ...)."""
        errors = self._ray.exceptions
        try:
            return self._ray.get(ref)
        except errors.RayTaskError as exc:  # raised by the run: hand back the original exception
            cause = getattr(exc, "cause", None)
            return cause if isinstance(cause, BaseException) else exc
        except errors.RayError as exc:
            return exc
