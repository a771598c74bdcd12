"""The result store: one JSON record per finished run, written atomically, never trusted blindly.

Layout under the results directory::

    runs/<task>/<label>__seed<k>__<run_id>.json     one record per run
    summary.json, summary.csv, figures/, report.html written by ``posenc compare``

A record is written once, when its run has finished: temp file in the same
directory, ``flush`` + ``fsync``, ``os.replace`` (atomic on POSIX and Windows),
then ``fsync`` of the directory. A crash or SIGKILL therefore leaves either the
complete previous state or the complete new record, never half a file under
the final name. Reading checks everything anyway: valid JSON, the schema tag
and required keys, a SHA-256 checksum over the canonical JSON of the rest, and
that the stored spec hashes to the run id we asked for, and that the result has
the shape every reader needs (:func:`result_problem`: a checksum-valid record
from another posenc version must not crash a summary or silently lose a seed).
Anything else is reported as corrupt, moved aside (``*.corrupt``) and redone.

A record names the benchmark version it was written under (:data:`BENCHMARK_VERSION`,
in its spec); one from another version is never resumed or summarised as a current
result: :func:`version_problem` says why, and the runner says so once per directory.

Each record keeps the trained model's weights next to it (``<record stem>.pt``,
``torch.save`` of the state dict, written atomically before the record; the record
holds their SHA-256): :func:`load_weights` checks them, :func:`load_model` rebuilds
the trained model (e.g. to draw its attention).

Several processes may share a results directory (see docs/guarantees.md):
records are per run and written atomically; a temp file is named after the
host and pid of its writer and removed only when that writer is gone (or the
file is a day old); summaries are written under an exclusive lock
(:meth:`ResultStore.lock`), each from its own invocation's grid.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import pickle
import platform
import socket
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy
import torch

import posenc
from posenc.bench.spec import BENCHMARK_HISTORY, BENCHMARK_VERSION, WEIGHTS_KEY, RunSpec
from posenc.errors import PosencError

SCHEMA = "posenc.bench.run/1"
REQUIRED = ("schema", "run_id", "label", "spec", "versions", "result", "checksum")
MAX_RECORD_BYTES = 64 << 20  # a record is ~10-500 KB; anything this large is not one of ours
STALE_TEMP_SECONDS = 24 * 3600  # a temp file this old is abandoned, whoever wrote it
_HOST = socket.gethostname().replace("~", "-").replace("/", "-") or "host"
log = logging.getLogger("posenc")


@functools.cache
def _umask() -> int:
    """The process umask, read on first use (never at import: importing changes no global state).

    Linux reports it in /proc/self/status; elsewhere the only way to read it is to set it
    and set it back, which is done once, here, when the first record is written.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: store non-finite floats as strings ("inf", "nan")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


def checksum(record: dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256(canonical(body).encode()).hexdigest()


def versions() -> dict[str, str]:
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "posenc": posenc.__version__,
        "platform": platform.platform(),
    }


def make_record(
    spec: RunSpec, payload: dict[str, Any], weights: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The record of a finished run; ``weights``: ``{"file", "sha256", "bytes"}`` of its weights file
    (the weights themselves, payload key ``weights_bytes``, never go into the JSON)."""
    payload = {k: v for k, v in payload.items() if k != WEIGHTS_KEY}
    record = {
        "schema": SCHEMA,
        "run_id": spec.run_id,
        "label": spec.label,
        "benchmark": spec.benchmark,
        "spec": spec.to_dict(),
        "versions": versions(),
        "result": _finite(payload),
    }
    if weights is not None:
        record["weights"] = weights
    record["checksum"] = checksum(record)
    return record


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one (see
    :func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one.

    The temp file ``.NAME~HOST~PID~RANDOM.tmp`` names its writer, so that cleaning up
    after a killed writer never removes the file a live one is writing
    (:func:`stale_temp_file`).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}~{_HOST}~{os.getpid()}~"
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):  # mkstemp makes 0600 files; results are meant to be shared
                os.fchmod(handle.fileno(), 0o666 & ~_umask())
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def stale_temp_file(path: Path, *, now: float | None = None) -> bool:
    """True if the temp file ``path`` was left by a writer that is gone.

    Its name says which host and pid wrote it: on this host, a pid that no longer
    exists means the writer was killed mid-write. A file from another host (a shared
    filesystem) or without a writer in its name is stale only once it is
    :data:`STALE_TEMP_SECONDS` old (a write takes milliseconds).
    """
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > STALE_TEMP_SECONDS:
        return True
    parts = path.name[: -len(".tmp")].rsplit("~", 3)
    if len(parts) != 4 or parts[1] != _HOST or not parts[2].isdigit():
        return False
    return not _pid_alive(int(parts[2]))


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # exists but is not ours, or we cannot tell: keep its file
        return True
    return True


def _is_number(x: Any) -> bool:
    """A stored float: a JSON number, or "inf"/"-inf"/"nan" (how records store non-finite values)."""
    return (isinstance(x, (int, float)) and not isinstance(x, bool)) or x in ("inf", "-inf", "nan")


def _numbers_problem(where: str, value: Any, length: int | None = None) -> str | None:
    if not isinstance(value, list) or not all(_is_number(x) for x in value):
        return f"{where} is not a list of numbers"
    if length is not None and len(value) != length:
        return f"{where} has {len(value)} values, expected {length}"
    return None


def _int_list_problem(where: str, value: Any) -> str | None:
    if not isinstance(value, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in value):
        return f"{where} is not a list of integers"
    return None


def _train_problem(train: Any) -> str | None:
    """What the summaries read of ``result.train`` (shared by runs and tuning candidates)."""
    if not isinstance(train, dict):
        return "result.train is missing"
    if not isinstance(train.get("converged"), bool):
        return "result.train.converged is not true/false"
    if not isinstance(train.get("steps"), int) or isinstance(train.get("steps"), bool):
        return "result.train.steps is not an integer"
    if train["converged"] and not isinstance(train.get("steps_to_converge"), int):
        return "result.train.steps_to_converge is not an integer"
    checks = train.get("checks")
    if not isinstance(checks, dict) or _int_list_problem("result.train.checks.step", checks.get("step")):
        return "result.train.checks is missing"
    metrics = [k for k in checks if k != "step"]
    if len(metrics) != 1:
        return "result.train.checks must hold one metric"
    problem = _numbers_problem(f"result.train.checks.{metrics[0]}", checks[metrics[0]], len(checks["step"]))
    if problem or not _is_number(train.get("final_loss")):
        return problem or "result.train.final_loss is not a number"
    return None


def result_problem(result: Any, spec: RunSpec) -> str | None:
    """None if ``result`` has everything the summaries, figures and report read, else what is wrong.

    Checked beyond the checksum because a record can be checksum-valid and still not
    readable by this version (written by another posenc version with the same run id).
    """
    if not isinstance(result, dict):
        return "result is not a JSON object"
    train, timing, evaluation = result.get("train"), result.get("timing"), result.get("eval")
    problem = _train_problem(train)
    if problem or not isinstance(train, dict):
        return problem or "result.train is missing"
    problem = _numbers_problem("result.train.loss", train.get("loss"), train["steps"])
    if problem:
        return problem
    if not isinstance(timing, dict):
        return "result.timing is missing"
    for key in ("steps_per_second", "train_wall_seconds"):
        if timing.get(key) is not None and not _is_number(timing[key]):
            return f"result.timing.{key} is not a number"
    if not isinstance(evaluation, dict):
        return "result.eval is missing or not a JSON object"
    if not evaluation:
        return "result has no evaluation (result.eval is empty)"
    expected = {"default", *spec.scalings}
    if set(evaluation) != expected:
        return f"result.eval has variants {sorted(evaluation)}, expected {sorted(expected)}"
    lm = spec.task == "lm"
    lengths = list(spec.eval.lm_lengths if lm else spec.eval.lengths)
    for variant, ev in evaluation.items():
        where = f"result.eval.{variant}"
        if not isinstance(ev, dict):
            return f"{where} is not a JSON object"
        if ev.get("lengths") != lengths:
            return f"{where}.lengths differ from the spec's evaluation lengths"
        for key in ("bits_per_byte",) if lm else ("exact_match", "token_accuracy"):
            problem = _numbers_problem(f"{where}.{key}", ev.get(key), len(lengths))
            if problem:
                return problem
        problem = _lm_problem(where, ev, len(lengths)) if lm else _task_problem(where, ev, spec)
        if problem:
            return problem
    return None


def _task_problem(where: str, ev: dict[str, Any], spec: RunSpec) -> str | None:
    per = ev.get("per_example")
    if not isinstance(per, dict):
        return f"{where}.per_example is missing"
    for key in ("exact_match", "token_accuracy"):
        rows = per.get(key)
        if not isinstance(rows, list) or len(rows) != len(spec.eval.lengths):
            return f"{where}.per_example.{key} has no row per length"
        for row in rows:
            problem = _numbers_problem(f"{where}.per_example.{key}", row, spec.eval.samples)
            if problem:
                return problem
    return None


def _lm_problem(where: str, ev: dict[str, Any], count: int) -> str | None:
    if ev.get("ratio_to_train") is not None:
        problem = _numbers_problem(f"{where}.ratio_to_train", ev["ratio_to_train"], count)
        if problem:
            return problem
    windows = ev.get("window_nats")
    if not isinstance(windows, list) or len(windows) != count:
        return f"{where}.window_nats has no row per length"
    for row in windows:
        problem = _numbers_problem(f"{where}.window_nats", row)
        if problem:
            return problem
    lastk, by_position = ev.get("lastk"), ev.get("loss_by_position")
    if not isinstance(lastk, dict) or not isinstance(lastk.get("contexts"), list):
        return f"{where}.lastk is missing"
    problem = _numbers_problem(f"{where}.lastk.contexts", lastk["contexts"]) or _numbers_problem(
        f"{where}.lastk.nats_per_byte", lastk.get("nats_per_byte"), len(lastk["contexts"])
    )
    if problem:
        return problem
    if not isinstance(by_position, dict):
        return f"{where}.loss_by_position is missing"
    return _numbers_problem(f"{where}.loss_by_position.nats_per_byte", by_position.get("nats_per_byte"))


def record_version(data: Any) -> int | None:
    """The benchmark version a record was written under (1 if it predates versions), or None
    when ``data`` does not look like a record at all."""
    spec = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        return None
    version = spec.get("benchmark", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def version_problem(data: Any) -> str | None:
    """Why a record of another benchmark version is not a current result (None if it is current)."""
    version = record_version(data)
    if version is None or version == BENCHMARK_VERSION:
        return None
    meaning = BENCHMARK_HISTORY.get(version, "unknown to this posenc")
    return (
        f"written by benchmark version {version} ({meaning}); this posenc runs version "
        f"{BENCHMARK_VERSION} ({BENCHMARK_HISTORY[BENCHMARK_VERSION]})"
    )


def read_record_file(path: Path) -> tuple[Any, str | None]:
    """``(parsed JSON, None)`` or ``(None, why it cannot be read)``; never reads more than
    :data:`MAX_RECORD_BYTES` (a huge or endless file is refused, not loaded)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_RECORD_BYTES + 1)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or type(exc).__name__})"
    if len(raw) > MAX_RECORD_BYTES:
        return None, f"larger than {MAX_RECORD_BYTES >> 20} MiB"
    try:
        return json.loads(raw.decode("utf-8")), None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return None, f"unreadable JSON ({type(exc).__name__})"


ResultCheck = Callable[[Any, RunSpec], "str | None"]


def tune_problem(result: Any, spec: RunSpec) -> str | None:
    """:func:`result_problem` for a learning-rate candidate (held-out checks only)."""
    if not isinstance(result, dict) or not _is_number(result.get("lr")):
        return "result.lr is not a number"
    return _train_problem(result.get("train"))


def validate_record(
    data: Any, expected_run_id: str | None = None, problem: ResultCheck = result_problem
) -> str | None:
    """None if ``data`` is a trustworthy record, else the reason it is not (``problem``
    checks the result: :func:`result_problem` for runs, :func:`tune_problem` for candidates)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    other = version_problem(data)
    if other:
        return other
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        return f"missing keys {missing}"
    if data["schema"] != SCHEMA:
        return f"schema {data['schema']!r} != {SCHEMA!r}"
    if checksum(data) != data["checksum"]:
        return "checksum mismatch"
    try:
        spec = RunSpec.from_dict(data["spec"])
    except (TypeError, ValueError, KeyError) as exc:
        return f"spec does not parse ({exc})"
    if spec.run_id != data["run_id"]:
        return "spec does not hash to run_id"
    if expected_run_id is not None and data["run_id"] != expected_run_id:
        return f"run_id {data['run_id']} != expected {expected_run_id}"
    if not isinstance(data["label"], str):
        return "label is not a string"
    weights = data.get("weights")
    if weights is not None and not (
        isinstance(weights, dict)
        and isinstance(weights.get("file"), str)
        and isinstance(weights.get("sha256"), str)
    ):
        return "weights entry is malformed"
    return problem(data["result"], spec)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def weights_problem(record_path: Path, record: dict[str, Any]) -> str | None:
    """None if the weights file a record names is there and matches its checksum."""
    entry = record.get("weights")
    if entry is None:
        return None
    path = record_path.parent / entry["file"]
    try:
        actual = file_sha256(path)
    except OSError as exc:
        return f"weights file {path.name} unreadable ({exc.strerror or type(exc).__name__})"
    return None if actual == entry["sha256"] else f"weights file {path.name} does not match its checksum"


def load_weights(record_path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The trained weights (state dict) kept next to a record, after checking the record, its
    checksum and that the file holds a state dict; each failure one PosencError naming the file."""
    path = Path(record_path)
    data, reason = read_record_file(path)
    reason = reason or validate_record(data)
    if reason is not None:
        reason = f"not a valid run record ({reason})"
    elif "weights" not in data:
        reason = "the record keeps no weights (written before posenc kept them: rerun posenc compare)"
    else:
        reason = weights_problem(path, data)
        reason = reason and f"{reason}; rerun posenc compare to redo the run"
    if reason is not None:
        raise PosencError(f"cannot load the weights of {path}: {reason}")
    weights = path.parent / data["weights"]["file"]
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as exc:
        raise PosencError(
            f"cannot load the weights of {path}: {weights.name} is not a saved state dict ({type(exc).__name__})"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PosencError(f"cannot load the weights of {path}: {weights.name} is not a state dict of tensors")
    return state


class ResultStore:
    """Records of finished runs under ``root`` (``problem``: how a result is checked)."""

    def __init__(self, root: str | os.PathLike, *, problem: ResultCheck = result_problem) -> None:
        self.root = Path(root)
        self.runs = self.root / "runs"
        self.problem = problem

    def path_for(self, spec: RunSpec) -> Path:
        safe = spec.label.replace("/", "_").replace("@", "-at-")
        return self.runs / spec.task / f"{safe}__seed{spec.seed}__{spec.run_id}.json"

    def load(self, spec: RunSpec) -> tuple[dict[str, Any] | None, str | None]:
        """``(record, None)`` if a valid one exists; ``(None, reason)`` if corrupt; ``(None, None)`` if absent."""
        path = self.path_for(spec)
        if not path.exists():
            return None, None
        data, reason = read_record_file(path)
        if reason is None:
            reason = validate_record(data, spec.run_id, self.problem) or weights_problem(path, data)
            if reason is None:
                return data, None
        return None, reason

    def quarantine(self, spec: RunSpec) -> Path | None:
        """Move a corrupt record aside (kept for inspection, never read again).

        Checked again just before the move, so that a valid record another process has
        written in the meantime is kept. None if there was nothing (left) to move.
        An OSError (e.g. a read-only directory) propagates, naming the file.
        """
        path = self.path_for(spec)
        record, reason = self.load(spec)
        if record is not None or reason is None:
            return None
        target = path.with_suffix(".json.corrupt")
        try:
            os.replace(path, target)
        except FileNotFoundError:  # another process moved it first
            return None
        return target

    def write(self, spec: RunSpec, payload: dict[str, Any]) -> Path:
        """Write the record of a finished run; payload key ``weights_bytes`` (the trained
        weights) goes to ``<record stem>.pt`` first, so a record never names a missing file."""
        path = self.path_for(spec)
        payload = dict(payload)
        blob = payload.pop(WEIGHTS_KEY, None)
        weights = None
        if blob is not None:
            target = path.with_suffix(".pt")
            atomic_write_bytes(target, blob)
            weights = {"file": target.name, "sha256": hashlib.sha256(blob).hexdigest(), "bytes": len(blob)}
        atomic_write_text(
            path, json.dumps(make_record(spec, payload, weights), indent=1, sort_keys=True, allow_nan=False)
        )
        return path

    def other_versions(self) -> dict[int, int]:
        """``{benchmark version: number of records}`` under ``runs/`` written by another
        benchmark version than this posenc's (never resumed, never summarised)."""
        counts: dict[int, int] = {}
        for path in self.runs.glob("*/*.json"):
            data, reason = read_record_file(path)
            version = None if reason else record_version(data)
            if version is not None and version != BENCHMARK_VERSION:
                counts[version] = counts.get(version, 0) + 1
        return counts

    def current_grid(self) -> set[str] | None:
        """Run ids of the grid whose summaries are in this directory (``grid.json``), if any."""
        try:
            data, reason = read_record_file(self.root / "grid.json")
            return None if reason else set(data["run_ids"])
        except (KeyError, TypeError):
            return None

    def write_grid(self, run_ids: list[str], profile: str) -> None:
        text = json.dumps({"profile": profile, "run_ids": sorted(run_ids)}, indent=1)
        atomic_write_text(self.root / "grid.json", text)

    def check_writable(self) -> None:
        """Create ``runs/`` and a probe file now, so a directory that cannot hold records
        fails before any run instead of after the first one (OSError naming the path)."""
        self.runs.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".probe~{_HOST}~{os.getpid()}~", suffix=".tmp", dir=self.runs)
        os.close(fd)
        os.unlink(probe)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock on this directory's summaries (``.lock``; POSIX ``flock``).

        Held while one ``posenc compare`` writes ``grid.json``, the summaries, figures
        and report, so that concurrent runs never interleave their files. Records need
        no lock (one file per run, written atomically). Without ``fcntl`` (Windows) it
        does nothing.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def records(
        self,
        *,
        latest_grid: bool = True,
        run_ids: set[str] | list[str] | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Every valid record under ``runs/``; a file that is not one is skipped with one
        warning line (``warn``, default the ``posenc`` logger), never trusted.

        ``run_ids`` selects exactly those runs (what one ``posenc compare`` invocation
        ran). Otherwise, with ``latest_grid`` (default) and a ``grid.json`` present, only
        the runs of the grid whose summaries are here: an output directory reused across
        profiles must not average a smoke run into a quick one.
        """
        wanted = set(run_ids) if run_ids is not None else (self.current_grid() if latest_grid else None)
        out = []
        for path in sorted(self.runs.glob("*/*.json")):
            data, reason = read_record_file(path)
            if reason is None and version_problem(data):
                continue  # another benchmark version: counted once by the caller (other_versions)
            if reason is None:
                reason = validate_record(data, problem=self.problem)
            if reason is not None:
                _warn_once(
                    warn, path, f"posenc: skipping {path}: not a valid record ({reason}); "
                    "rerun posenc compare to redo it"
                )  # fmt: skip
                continue
            if wanted is None or data["run_id"] in wanted:
                out.append(data)
        return out

    def clean_temp_files(self) -> int:
        """Remove temp files whose writer is gone (killed mid-write); see :func:`stale_temp_file`."""
        count = 0
        for path in [*self.runs.glob("*/.*.tmp"), *self.runs.glob(".*.tmp"), *self.root.glob(".*.tmp")]:
            if stale_temp_file(path):
                path.unlink(missing_ok=True)
                count += 1
        return count


_warned: set[tuple[str, float]] = set()


def _warn_once(warn: Callable[[str], None] | None, path: Path, message: str) -> None:
    """One warning per bad file (and version of it) per process: several readers list the same files."""
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        key = (str(path), 0.0)
    if key not in _warned:
        _warned.add(key)
        (warn or log.warning)(message)
