"""The result store: one JSON record per finished run, written atomically, never trusted blindly.

Layout under the results directory::

    runs/<task>/<label>__seed<k>__<run_id>.json     one record per run
    summary.json, summary.csv, figures/, report.html written by ``posenc compare``

A record is written once, when its run has finished, atomically
(:mod:`posenc.records.files`): a crash or SIGKILL leaves either the complete
previous state or the complete new record, never half a file under the final
name. Reading checks everything anyway: valid JSON, the schema tag and required
keys, a SHA-256 checksum over the canonical JSON of the rest, and that the
stored spec hashes to the run id we asked for, and that the result has the
shape every reader needs (:func:`posenc.records.schema.result_problem`: a
checksum-valid record from another posenc version must not crash a summary or
silently lose a seed).
Anything else is reported as corrupt, moved aside (``*.corrupt``) and redone.

A record names the benchmark version it was written under (:data:`BENCHMARK_VERSION`,
in its spec); one from another version is never resumed or summarised as a current
result: :func:`version_problem` says why, and the runner says so once per directory.

Each record keeps the trained model's weights next to it (``<record stem>.pt``,
``torch.save`` of the state dict, written atomically before the record; the record
holds their SHA-256): :func:`load_weights` checks them, and
:func:`posenc.results.load_model` rebuilds the trained model (e.g. to draw its attention).

Several processes may share a results directory (see docs/guarantees.md):
records are per run and written atomically; a temp file is named after the
host and pid of its writer and removed only when that writer is gone (or the
file is a day old); summaries are written under an exclusive lock
(:meth:`ResultStore.lock`), each from its own invocation's grid.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import logging
import math
import os
import platform
import re
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy
import torch

import posenc
from posenc.core.errors import PosencError
from posenc.records.files import (
    HOST,
    atomic_write_bytes,
    atomic_write_text,
    file_sha256,
    open_regular,
    read_record_file,
    safe_name,
    stale_temp_file,
)
from posenc.records.schema import ResultCheck, result_problem
from posenc.records.spec import BENCHMARK_HISTORY, BENCHMARK_VERSION, WEIGHTS_KEY, RunSpec

#: The records' format tag (named after the package that first wrote it; kept so that
#: existing records stay readable).
SCHEMA = "posenc.bench.run/1"
REQUIRED = ("schema", "run_id", "label", "spec", "versions", "result", "checksum")
#: Largest weights file a record may name (the benchmark's models take a few MB; a record is data,
#: and its size is checked against the file before any byte is read).
MAX_WEIGHTS_BYTES = 16 << 30
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HELD_LOCKS = threading.local()  # .roots: the directories whose lock this thread holds
log = logging.getLogger("posenc")


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


def record_version(data: Any) -> int | None:
    """The benchmark version a record was written under (1 if it predates versions), or None
    when ``data`` does not look like a record at all."""
    spec = data.get("spec") if isinstance(data, dict) else None
    if not isinstance(spec, dict):
        return None
    version = spec.get("benchmark", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def version_problem(data: Any, current: int = BENCHMARK_VERSION) -> str | None:
    """Why a record of another benchmark version than ``current`` (default: this posenc's) is not a
    result of it (None if it is)."""
    version = record_version(data)
    if version is None or version == current:
        return None
    meaning = BENCHMARK_HISTORY.get(version, "unknown to this posenc")
    return (
        f"written by benchmark version {version} ({meaning}); this posenc runs version "
        f"{BENCHMARK_VERSION} ({BENCHMARK_HISTORY[BENCHMARK_VERSION]})"
    )


def validate_record(
    data: Any,
    expected_run_id: str | None = None,
    problem: ResultCheck = result_problem,
    *,
    version: int = BENCHMARK_VERSION,
) -> str | None:
    """None if ``data`` is a trustworthy record of benchmark ``version`` (default: this posenc's; the
    records of a table published under an earlier one are read as that version's), else the reason it
    is not (``problem`` checks the result: :func:`~posenc.records.schema.result_problem` for runs,
    :func:`~posenc.records.schema.tune_problem` for candidates)."""
    if not isinstance(data, dict):
        return "not a JSON object"
    other = version_problem(data, version)
    if other:
        return other
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        return f"missing keys {missing}"
    if data["schema"] != SCHEMA:
        return f"schema {data['schema']!r} != {SCHEMA!r}"
    try:
        if checksum(data) != data["checksum"]:
            return "checksum mismatch"
    except (TypeError, ValueError):  # NaN, Infinity: JSON that posenc never writes
        return "holds values that are not JSON (NaN or Infinity)"
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
    stamp = data["versions"]
    if not isinstance(stamp, dict) or not all(isinstance(v, str) for v in stamp.values()):
        return "versions is not a JSON object of strings"
    if "weights" in data:
        reason = weights_entry_problem(data["weights"])
        if reason:
            return reason
    return problem(data["result"], spec)


def weights_entry_problem(entry: Any) -> str | None:
    """None if a record's ``weights`` entry is ``{"file": a bare file name, "sha256": 64 hex digits,
    "bytes": 0 .. MAX_WEIGHTS_BYTES}`` (the file is then looked for next to the record only)."""
    if not isinstance(entry, dict):
        return "weights entry is malformed"
    name, sha, size = entry.get("file"), entry.get("sha256"), entry.get("bytes")
    if not isinstance(name, str) or not isinstance(sha, str) or not _HEX64.fullmatch(sha):
        return "weights entry is malformed"
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        return f"weights file {name!r} is not a file name next to the record (a path is never followed)"
    if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_WEIGHTS_BYTES:
        return f"weights entry's size {size!r} is not a number of bytes in [0, {MAX_WEIGHTS_BYTES}]"
    return None


def weights_file(record_path: Path, entry: dict[str, Any]) -> Path:
    """The weights file a (valid) record names: next to the record, after symlinks too; anything
    else raises OSError naming why (a symlink that leads out of the record's directory)."""
    path = record_path.parent / entry["file"]
    if Path(os.path.realpath(path)).parent != Path(os.path.realpath(record_path.parent)):
        raise OSError(errno.EXDEV, "a link that leads out of the record's directory", str(path))
    return path


def weights_problem(record_path: Path, record: dict[str, Any]) -> str | None:
    """None if the weights file a record names is there, next to it, and matches its size and checksum
    (read no further than the size the record gives; a valid record is assumed: :func:`validate_record`)."""
    entry = record.get("weights")
    if entry is None:
        return None
    try:
        actual = file_sha256(weights_file(record_path, entry), size=entry["bytes"])
    except OSError as exc:
        return f"weights file {entry['file']} unreadable ({exc.strerror or type(exc).__name__})"
    return None if actual == entry["sha256"] else f"weights file {entry['file']} does not match its checksum"


def load_weights(record_path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The trained weights (state dict) kept next to a record, after checking the record, its
    checksum and that the file holds a state dict; each failure one PosencError naming the file."""
    return load_record_and_weights(record_path)[1]


def load_record_and_weights(record_path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(record, state dict)``, from one read of the record: as :func:`load_weights`."""
    path = Path(record_path)
    data, reason = read_record_file(path)
    reason = reason or validate_record(data)
    if reason is not None:
        reason = f"not a valid run record ({reason})"
    elif "weights" not in data:
        reason = "the record keeps no weights (written before posenc kept them: rerun posenc compare)"
    else:
        blob, reason = _read_weights(path, data["weights"])
        reason = reason and f"{reason}; rerun posenc compare to redo the run"
    if reason is not None:
        raise PosencError(f"cannot load the weights of {path}: {reason}")
    name = data["weights"]["file"]
    try:  # the bytes just checked, as data only: tensors, never pickled objects (weights_only)
        state = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    # the bytes are data: whatever torch's unpickler raises on them (IndexError and KeyError too) says
    # that they are not a saved state dict
    except Exception as exc:  # noqa: BLE001
        raise PosencError(
            f"cannot load the weights of {path}: {name} is not a saved state dict ({type(exc).__name__})"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise PosencError(f"cannot load the weights of {path}: {name} is not a state dict of tensors")
    return data, state


def _read_weights(record_path: Path, entry: dict[str, Any]) -> tuple[bytes, str | None]:
    """``(the weights file's bytes, None)``, or ``(b"", why not)``: as :func:`weights_problem`, reading
    the file once, into memory (its size checked first), so what is loaded is what was hashed."""
    try:
        with open_regular(weights_file(record_path, entry)) as handle:
            size = os.fstat(handle.fileno()).st_size
            blob = handle.read(entry["bytes"] + 1) if size == entry["bytes"] else b""
    except OSError as exc:
        return b"", f"weights file {entry['file']} unreadable ({exc.strerror or type(exc).__name__})"
    if size != entry["bytes"] or len(blob) != size:
        return b"", f"weights file {entry['file']} holds {size} bytes, the record says {entry['bytes']}"
    if hashlib.sha256(blob).hexdigest() != entry["sha256"]:
        return b"", f"weights file {entry['file']} does not match its checksum"
    return blob, None


class ResultStore:
    """Records of finished runs under ``root`` (``problem``: how a result is checked)."""

    def __init__(self, root: str | os.PathLike, *, problem: ResultCheck = result_problem) -> None:
        self.root = Path(root)
        self.runs = self.root / "runs"
        self.problem = problem

    def path_for(self, spec: RunSpec) -> Path:
        """``runs/TASK/LABEL__seedS__ID.json``: task and label made file names (:func:`safe_name`)."""
        label = safe_name(spec.label.replace("@", "-at-"))
        return self.runs / safe_name(spec.task) / f"{label}__seed{spec.seed}__{spec.run_id}.json"

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
        for path in self.record_files():
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
        fd, probe = tempfile.mkstemp(prefix=f".probe~{HOST}~{os.getpid()}~", suffix=".tmp", dir=self.runs)
        os.close(fd)
        os.unlink(probe)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock on this directory's summaries (``.lock``; POSIX ``flock``).

        Held while one ``posenc compare`` writes ``grid.json``, the summaries, figures,
        report, ``config.toml`` and ``run.json``, so that concurrent runs never interleave
        their files. Records need no lock (one file per run, written atomically). A thread
        that holds it may take it again (the inner hold is free). Without ``fcntl``
        (Windows) it does nothing.
        """
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            yield
            return
        self.root.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.root)
        held: set[str] = _HELD_LOCKS.__dict__.setdefault("roots", set())
        if key in held:  # this thread holds it already: flock on a second descriptor would wait forever
            yield
            return
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            held.add(key)
            try:
                yield
            finally:
                held.discard(key)
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
        for path in self.record_files():
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

    def record_files(self) -> list[Path]:
        """The record files under ``runs/``, by name: ``TASK/NAME.json`` as ``posenc compare``
        writes them, and ``TASK/NAME.json.gz`` as the published tables ship them (one whose
        ``TASK/NAME.json`` is there too is the same record: the plain file is read)."""
        plain = list(self.runs.glob("*/*.json"))
        packed = [p for p in self.runs.glob("*/*.json.gz") if not p.with_suffix("").exists()]
        return sorted([*plain, *packed], key=lambda p: str(p).removesuffix(".gz"))

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
