"""Records of finished cells: ``OUT/cells/RUN_ID.json``, written atomically as each cell finishes.

A record holds the cell (without its token ids), the checkpoint, the versions and the result,
and a SHA-256 checksum of all of it. A record that does not check (a crash mid-write cannot make
one, a hand edit or another program can) is moved aside as ``RUN_ID.json.corrupt`` with one line
naming it, and its cell runs again: unreadable, larger than 64 MiB or nested deeper than records
nest (:func:`posenc.records.files.read_record_file`), another schema, a checksum that does not
match, or a result without what the summary reads (:func:`result_problem`: a text cell's loss at
every position, a prompts cell's scored answer to each of its prompts).

Several ``posenc extend`` invocations may share ``OUT`` (on one machine):

- *No cell is computed twice.* Before running a cell an invocation claims it
  (``cells/RUN_ID.claim``, created with ``O_EXCL`` under a short ``flock``, naming its host, pid and
  the process's start time). A cell another live invocation has claimed is not run here: this
  invocation computes the rest, then waits for that record (a claim whose process has ended is
  taken over, and the cell run here). A claim is removed when its record is written, or when its
  invocation ends.
- *Each invocation keeps its own files.* ``OUT/invocations/NAME-HASH/`` (HASH: of its effective
  protocol) holds its ``protocol.toml`` (written before the first cell), ``summary.json``,
  ``summary.md`` and ``run.json``; the files at the top of ``OUT`` (those, and ``figures/``) are one
  set, written together under an exclusive lock (``OUT/.lock``) by each invocation as it finishes:
  they describe the last to finish, and ``run.json`` names its directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from posenc.core import untrusted
from posenc.core.errors import PosencError
from posenc.extend.checkpoint import NUMERIC_PACKAGES, numeric_versions
from posenc.extend.plan import EXTEND_VERSION, ExtendCell
from posenc.records.files import HOST, atomic_write_text, read_record_file, safe_name
from posenc.records.store import ResultStore, canonical, checksum, versions

SCHEMA = f"posenc-extend/{EXTEND_VERSION}"
STALE_CLAIM_SECONDS = 24 * 3600  # a claim from another host is trusted this long (no pid to ask)
POLL_SECONDS = 2.0  # how often a waiting invocation looks for another's records


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def result_problem(result: Any, cell: ExtendCell) -> str | None:
    """None if ``result`` has what the summary reads of ``cell``, else what is wrong."""
    if not isinstance(result, dict):
        return "result is not a JSON object"
    if cell.kind == "text":
        nll = result.get("nll")
        if not isinstance(nll, list) or not all(_is_number(x) for x in nll):
            return "result.nll is not a list of numbers"
        if len(nll) != len(cell.tokens) - 1:
            return f"result.nll has {len(nll)} values, the cell {len(cell.tokens) - 1}"
        return None
    answers = result.get("answers")
    if not isinstance(answers, list) or len(answers) != len(cell.questions):
        return f"result.answers is not a list of {len(cell.questions)} answers"
    for answer, question in zip(answers, cell.questions):
        if not isinstance(answer, dict) or not isinstance(answer.get("correct"), bool):
            return "result.answers holds an answer without correct: true/false"
        score = answer.get("score")
        if not _is_number(score) or not 0.0 <= float(score) <= 1.0:  # type: ignore[arg-type]
            return "result.answers holds an answer without a score in [0, 1]"
        if answer["correct"] != (score == 1.0):
            return "result.answers holds an answer whose correct is not its score of 1"
        if answer.get("index") != question.index:
            return "result.answers does not answer the cell's prompts"
    return None


def _process_start(pid: int) -> str | None:
    """When process ``pid`` started (Linux: field 22 of /proc/PID/stat), to tell it from a later
    process that got the same pid; None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(claim: Any) -> bool:
    """Whether the process a claim names still runs (on another host: whether the claim is recent)."""
    if not isinstance(claim, dict) or not isinstance(claim.get("pid"), int):
        return False
    if claim.get("host") != HOST:
        return (
            isinstance(claim.get("since"), (int, float))
            and time.time() - claim["since"] < STALE_CLAIM_SECONDS
        )
    pid = claim["pid"]
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, not ours
        pass
    start = _process_start(pid)
    return start is None or claim.get("start") in (None, start)


class Store:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.cells = self.root / "cells"
        self.claimed: set[str] = set()  # run ids this process holds claims on
        self._me = {"host": HOST, "pid": os.getpid(), "start": _process_start(os.getpid())}

    def path(self, run_id: str) -> Path:
        return self.cells / f"{run_id}.json"

    def check_writable(self) -> None:
        self.cells.mkdir(parents=True, exist_ok=True)
        probe = self.cells / f".probe-{os.getpid()}"
        probe.write_text("")
        probe.unlink()

    def write(self, cell: ExtendCell, checkpoint: dict[str, Any], result: dict[str, Any]) -> None:
        """The cell's record (its claim released once it is written)."""
        record = {
            "schema": SCHEMA,
            "run_id": cell.run_id,
            "cell": cell.describe(),
            "checkpoint": checkpoint,
            "versions": {**versions(), **numeric_versions()},
            "result": result,
        }
        record["checksum"] = checksum(record)
        atomic_write_text(self.path(cell.run_id), canonical(record))
        self.release(cell.run_id)

    def load(self, cell: ExtendCell | str) -> tuple[dict[str, Any] | None, str | None]:
        """``(record, None)``, ``(None, None)`` when absent, ``(None, why)`` when it does not check
        (given the cell, its result is checked too: :func:`result_problem`)."""
        run_id = cell if isinstance(cell, str) else cell.run_id
        path = self.path(run_id)
        if not os.path.lexists(path):
            return None, None
        data, reason = read_record_file(path)
        if reason is not None:
            return None, reason
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            return None, f"not a {SCHEMA} record"
        try:
            if data.get("run_id") != run_id or data.get("checksum") != checksum(data):
                return None, "checksum mismatch"
        except (TypeError, ValueError):  # NaN or Infinity: JSON posenc never writes
            return None, "holds values that are not JSON (NaN or Infinity)"
        if not isinstance(data.get("result"), dict):
            return None, "no result"
        if not isinstance(data.get("versions"), dict):
            return None, "no versions"
        problem = None if isinstance(cell, str) else result_problem(data["result"], cell)
        return (None, problem) if problem else (data, None)

    def quarantine(self, cell: ExtendCell | str) -> None:
        """Move a record that does not check aside (``.corrupt``), checked again just before, so that
        a valid one another invocation has written in the meantime is kept."""
        run_id = cell if isinstance(cell, str) else cell.run_id
        record, reason = self.load(cell)
        if record is not None or reason is None:
            return
        path = self.path(run_id)
        try:
            os.replace(path, path.with_name(path.name + ".corrupt"))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise PosencError(f"cannot move the corrupt record {path} aside: {exc.strerror}") from None

    # -- claims: no cell computed by two invocations ------------------------------------------

    def _claim_path(self, run_id: str) -> Path:
        return self.cells / f"{run_id}.claim"

    @contextlib.contextmanager
    def _claims_lock(self) -> Iterator[None]:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX: O_EXCL alone
            yield
            return
        self.cells.mkdir(parents=True, exist_ok=True)
        with open(self.cells / ".claims.lock", "a") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def claimant(self, run_id: str) -> dict[str, Any] | None:
        """The live claim another process holds on a cell, or None (no claim, or its process is gone)."""
        path = self._claim_path(run_id)
        try:
            with untrusted.open_regular(path) as handle:
                claim = untrusted.loads(handle.read(4096).decode("utf-8", "replace"), max_depth=2)
        except (OSError, ValueError):
            claim = None if not os.path.lexists(path) else {}
        if claim is None:
            return None
        if isinstance(claim, dict) and all(claim.get(k) == v for k, v in self._me.items()):
            return None  # our own
        return claim if _alive(claim) else None

    def claim(self, run_id: str) -> bool:
        """Claim a cell for this process: True when it is ours (newly, or a claim whose process has
        ended taken over), False while another live process holds it."""
        if run_id in self.claimed:
            return True
        with self._claims_lock():
            path = self._claim_path(run_id)
            if os.path.lexists(path):
                if self.claimant(run_id) is not None:
                    return False
                path.unlink(missing_ok=True)  # its process has ended (or the file is not a claim)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:  # without flock: another process was first
                return False
            with os.fdopen(fd, "w") as handle:
                json.dump({**self._me, "since": time.time()}, handle)
        self.claimed.add(run_id)
        return True

    def release(self, run_id: str) -> None:
        """Remove this process's claim on a cell (after its record is written, or when giving up)."""
        if run_id not in self.claimed:
            return
        self.claimed.discard(run_id)
        with self._claims_lock():
            if self.claimant(run_id) is None:  # ours, or gone: never another process's
                with contextlib.suppress(FileNotFoundError):
                    self._claim_path(run_id).unlink()

    def release_all(self) -> None:
        for run_id in list(self.claimed):
            self.release(run_id)

    def run_claimed(
        self,
        todo: list[ExtendCell],
        results: dict[str, Any],
        run_cells: Callable[[list[ExtendCell]], list[tuple[str, str]]],
        log: Callable[[str], None],
    ) -> tuple[list[tuple[str, str]], int, int]:
        """Run the cells ``todo`` this invocation can claim (``run_cells``: runs some, writes their
        records, returns their failures), then wait for those another live invocation is computing,
        taking over any whose invocation ends first. ``(failures, cells run here, cells another
        invocation computed)``; every claim is released on the way out."""
        try:
            mine, theirs, shared = [], [], 0
            for cell in todo:
                if not self.claim(cell.run_id):
                    theirs.append(cell)
                    continue
                record, _ = self.load(cell)  # finished by another invocation since this one looked
                if record is None:
                    mine.append(cell)
                    continue
                results[cell.run_id] = record["result"]
                shared += 1
                self.release(cell.run_id)
            if theirs:
                holders = sorted(
                    {f"pid {c.get('pid')}" for c in map(self.claimant, (x.run_id for x in theirs)) if c}
                )
                log(
                    f"{len(theirs)} cell(s) are being computed by another posenc extend on {self.root} "
                    f"({', '.join(holders) or 'finishing'}): this run computes the other {len(mine)} and "
                    "waits for their records"
                )
            failed = run_cells(mine) if mine else []
            ran = len(mine)
            while theirs:
                waiting: list[ExtendCell] = []
                free: list[ExtendCell] = []
                for cell in theirs:
                    record, reason = self.load(cell)
                    if record is not None:
                        results[cell.run_id] = record["result"]
                        shared += 1
                    elif reason is None and not self.claim(cell.run_id):
                        waiting.append(cell)
                    else:
                        if reason is not None and self.claim(cell.run_id):
                            log(f"record {cell.run_id} is corrupt ({reason}); running its cell again")
                            self.quarantine(cell)
                        (free if cell.run_id in self.claimed else waiting).append(cell)
                if free:
                    failed += run_cells(free)
                    ran += len(free)
                theirs = waiting
                if theirs:
                    time.sleep(POLL_SECONDS)
            return failed, ran, shared
        finally:
            self.release_all()

    # -- the files of each invocation, and the top-level set ----------------------------------

    def invocation(
        self, name: str, protocol: str, header: str = "", *, write: bool = False, keep: bool = False
    ) -> Path:
        """``OUT/invocations/NAME-HASH``: the directory of one invocation's own files (HASH: of its
        effective protocol ``protocol``, so a rerun of the same protocol is the same invocation);
        with ``write``, its ``protocol.toml`` (``header``: the protocol with its comments) written
        now, before any cell runs, unless ``keep`` and one is there (a run in progress keeps its own)."""
        digest = hashlib.sha256(protocol.encode("utf-8")).hexdigest()[:12]
        directory = self.root / "invocations" / f"{safe_name(name)}-{digest}"
        own = directory / "protocol.toml"
        if write and not (keep and own.exists()):
            atomic_write_text(own, header or protocol)
        return directory

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Exclusive lock on the files at the top of ``OUT`` (``OUT/.lock``, as ``posenc compare``'s)."""
        with ResultStore(self.root).lock():
            yield

    def publish(self, invocation: Path, names: tuple[str, ...] = ("summary.json", "summary.md")) -> None:
        """Copy the top-level files ``names`` an invocation has just written into its own directory,
        and its ``protocol.toml`` (and ``run.json``, where it has one) to the top (under :meth:`lock`)."""
        invocation.mkdir(parents=True, exist_ok=True)
        for name in names:
            source = self.root / name
            if source.is_file():
                atomic_write_text(invocation / name, source.read_text(encoding="utf-8"))
        own_protocol = invocation / "protocol.toml"
        if own_protocol.is_file():
            atomic_write_text(self.root / "protocol.toml", own_protocol.read_text(encoding="utf-8"))
        own_run = invocation / "run.json"
        if own_run.is_file():
            info = json.loads(own_run.read_text(encoding="utf-8"))
            info["invocation"] = os.path.relpath(invocation, self.root)
            atomic_write_text(self.root / "run.json", json.dumps(info, indent=1))


def version_changes(
    records: dict[str, dict[str, Any]], current: dict[str, str], packages: tuple[str, ...]
) -> dict[str, int]:
    """``{"transformers 5.23.0 (this installation: 5.24.0)": cells}``: the finished cells computed
    with another version of one of ``packages`` than ``current`` (a record without one: "unknown")."""
    changed: dict[str, int] = {}
    for record in records.values():
        stamp: dict[str, Any] = record["versions"] if isinstance(record.get("versions"), dict) else {}
        for package in packages:
            theirs = stamp.get(package, "unknown")
            if theirs != current.get(package):
                said = f"{package} {theirs} (this installation: {current.get(package)})"
                changed[said] = changed.get(said, 0) + 1
    return changed


def check_versions(
    records: dict[str, dict[str, Any]], root: Path, *, allow_changed: bool, log: Callable[[str], None]
) -> int:
    """Refuse finished cells computed with other versions of what computes with the checkpoint
    (:data:`~posenc.extend.checkpoint.NUMERIC_PACKAGES`: a transformers upgrade can change a model's
    numerics) in one PosencError naming each change and its cells; with ``allow_changed`` they are
    kept, said once. Returns how many such cells there are."""
    changed = version_changes(records, numeric_versions(), NUMERIC_PACKAGES)
    if not changed:
        return 0
    cells = sum(1 for r in records.values() if version_changes({"": r}, numeric_versions(), NUMERIC_PACKAGES))
    listed = "; ".join(f"{what} in {count} cell(s)" for what, count in changed.items())
    if not allow_changed:
        raise PosencError(
            f"{cells} finished cell(s) in {root} were computed with other versions than this installation's: "
            f"{listed}; pass --allow-changed to keep them next to new cells, or write to another --out"
        )
    log(f"keeping {cells} cell(s) computed with other versions (--allow-changed): {listed}")
    return cells


__all__ = ["SCHEMA", "Store", "check_versions", "result_problem", "version_changes"]
