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
that the stored spec hashes to the run id we asked for. Anything else is
reported as corrupt, moved aside (``*.corrupt``) and redone.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import numpy
import torch

import posenc
from posenc.bench.spec import RunSpec

SCHEMA = "posenc.bench.run/1"
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read the process umask once (setting it back immediately)
REQUIRED = ("schema", "run_id", "spec", "versions", "result", "checksum")


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


def make_record(spec: RunSpec, payload: dict[str, Any]) -> dict[str, Any]:
    record = {
        "schema": SCHEMA,
        "run_id": spec.run_id,
        "label": spec.label,
        "spec": spec.to_dict(),
        "versions": versions(),
        "result": _finite(payload),
    }
    record["checksum"] = checksum(record)
    return record


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the whole new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if hasattr(os, "fchmod"):  # mkstemp makes 0600 files; results are meant to be shared
                os.fchmod(handle.fileno(), 0o666 & ~_UMASK)
            handle.write(text)
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


def validate_record(data: Any, expected_run_id: str | None = None) -> str | None:
    """None if ``data`` is a trustworthy record, else the reason it is not."""
    if not isinstance(data, dict):
        return "not a JSON object"
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
    if not isinstance(data["result"], dict) or "eval" not in data["result"]:
        return "result has no evaluation"
    return None


class ResultStore:
    """Records of finished runs under ``root``."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.runs = self.root / "runs"

    def path_for(self, spec: RunSpec) -> Path:
        safe = spec.label.replace("/", "_").replace("@", "-at-")
        return self.runs / spec.task / f"{safe}__seed{spec.seed}__{spec.run_id}.json"

    def load(self, spec: RunSpec) -> tuple[dict[str, Any] | None, str | None]:
        """``(record, None)`` if a valid one exists; ``(None, reason)`` if corrupt; ``(None, None)`` if absent."""
        path = self.path_for(spec)
        if not path.exists():
            return None, None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            reason: str | None = f"unreadable JSON ({type(exc).__name__})"
        else:
            reason = validate_record(data, spec.run_id)
            if reason is None:
                return data, None
        return None, reason

    def quarantine(self, spec: RunSpec) -> Path | None:
        """Move a corrupt record aside (kept for inspection, never read again)."""
        path = self.path_for(spec)
        if not path.exists():
            return None
        target = path.with_suffix(".json.corrupt")
        os.replace(path, target)
        return target

    def write(self, spec: RunSpec, payload: dict[str, Any]) -> Path:
        path = self.path_for(spec)
        atomic_write_text(
            path, json.dumps(make_record(spec, payload), indent=1, sort_keys=True, allow_nan=False)
        )
        return path

    def current_grid(self) -> set[str] | None:
        """Run ids of the last grid ``posenc compare`` ran here (``grid.json``), if any."""
        try:
            return set(json.loads((self.root / "grid.json").read_text(encoding="utf-8"))["run_ids"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_grid(self, run_ids: list[str], profile: str) -> None:
        text = json.dumps({"profile": profile, "run_ids": sorted(run_ids)}, indent=1)
        atomic_write_text(self.root / "grid.json", text)

    def records(self, *, latest_grid: bool = True) -> list[dict[str, Any]]:
        """Every valid record under ``runs/`` (corrupt files are skipped, not trusted).

        With ``latest_grid`` (default) and a ``grid.json`` present, only the runs of
        the last ``posenc compare`` grid: an output directory reused across profiles
        must not average a smoke run into a quick one.
        """
        wanted = self.current_grid() if latest_grid else None
        out = []
        for path in sorted(self.runs.glob("*/*.json")):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            if validate_record(data) is None and (wanted is None or data["run_id"] in wanted):
                out.append(data)
        return out

    def clean_temp_files(self) -> int:
        """Remove temp files left by a writer that was killed mid-write."""
        count = 0
        for path in self.runs.glob("*/.*.tmp"):
            path.unlink(missing_ok=True)
            count += 1
        return count
