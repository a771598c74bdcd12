"""Records of finished cells: ``OUT/cells/RUN_ID.json``, written atomically as each cell finishes.

A record holds the cell (without its token ids), the checkpoint, the versions and the result,
and a SHA-256 checksum of all of it; a record that does not check (a crash mid-write cannot make
one, a hand edit can) is moved aside as ``RUN_ID.json.corrupt`` and its cell run again. Two runs
sharing ``OUT`` write the same record for the same cell (the id names its inputs), whole.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from posenc.core.errors import PosencError
from posenc.extend.plan import EXTEND_VERSION, ExtendCell
from posenc.records.files import atomic_write_text, read_record_file
from posenc.records.store import canonical, checksum, versions

SCHEMA = f"posenc-extend/{EXTEND_VERSION}"


class Store:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cells = self.root / "cells"

    def path(self, run_id: str) -> Path:
        return self.cells / f"{run_id}.json"

    def check_writable(self) -> None:
        self.cells.mkdir(parents=True, exist_ok=True)
        probe = self.cells / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()

    def write(self, cell: ExtendCell, checkpoint: dict[str, Any], result: dict[str, Any]) -> None:
        record = {
            "schema": SCHEMA,
            "run_id": cell.run_id,
            "cell": cell.describe(),
            "checkpoint": checkpoint,
            "versions": versions(),
            "result": result,
        }
        record["checksum"] = checksum(record)
        atomic_write_text(self.path(cell.run_id), canonical(record))

    def load(self, run_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """``(record, None)``, ``(None, None)`` when absent, ``(None, why)`` when it does not check."""
        path = self.path(run_id)
        if not path.exists():
            return None, None
        data, reason = read_record_file(path)
        if reason is not None:
            return None, reason
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return None, f"not a {SCHEMA} record"
        if data.get("run_id") != run_id or data.get("checksum") != checksum(data):
            return None, "checksum mismatch"
        if not isinstance(data.get("result"), dict):
            return None, "no result"
        return data, None

    def quarantine(self, run_id: str) -> None:
        path = self.path(run_id)
        try:
            os.replace(path, path.with_name(path.name + ".corrupt"))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PosencError(f"cannot move the corrupt record {path} aside: {exc.strerror}") from None


__all__ = ["SCHEMA", "Store"]
