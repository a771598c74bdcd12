"""The records behind the published benchmark tables, shipped in the repository.

``benchmarks/records/BLOCK/`` holds, for each table the docs publish (BLOCK is the profile
whose run it shows), what ``scripts/update_benchmark_tables.py`` renders it from:

- ``runs/TASK/NAME.json.gz``: the records of exactly that profile's grid, each the file
  ``posenc compare`` wrote, byte for byte, gzip'd (``gunzip`` gives the record back). The
  trained weights are not shipped: a record still names its weights file and checksum, the
  file is absent, and nothing here reads it (``posenc plot --run`` on such a record says the
  file is missing);
- ``grid.json``: the profile and the run ids of its grid;
- ``run.json``: the run's own description (command, wall time, cores): the table's first line.

:func:`export` copies a block out of a ``posenc compare --out`` directory; :func:`load` reads
it back, checking every record (schema, checksum, run id) and that the records are exactly
the grid's, never fewer.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from docblocks import shown_command

from posenc.compare import tuning
from posenc.compare.grid import build_grid
from posenc.compare.profile import Profile, get_profile
from posenc.records.files import read_record_file
from posenc.records.spec import BENCHMARK_HISTORY, RunSpec
from posenc.records.store import ResultStore, record_version, validate_record

ROOT = Path(__file__).resolve().parent.parent
#: Where the records of the published tables live (one folder per block).
SHIPPED = ROOT / "benchmarks" / "records"
SUFFIX = ".json.gz"


class NotShipped(SystemExit):
    """No (complete, valid) records for a block under the shipped tree: the message says which."""


def block_dir(block: str, shipped: Path | None = None) -> Path:
    """``benchmarks/records/BLOCK`` (under ``shipped`` instead, when given)."""
    return (shipped or SHIPPED) / block


def grid_specs(prof: Profile, results: Path) -> list[RunSpec]:
    """The run specs ``posenc compare`` ran for ``prof`` into ``results``: the profile's grid with
    each learning rate as that run chose it (shipped with posenc, else tuned into
    ``results/tuning``). Nothing is run: a choice found in neither place stops here."""
    specs = build_grid(prof).specs
    if not prof.lr_grid:
        return specs
    share = dict(prof.tune_share)
    choices, _ = tuning.choose(
        specs, prof.lr_grid, tuning.tuning_store(results), _NothingRuns(prof.name, results), share=share,
        show_progress=False, log=lambda _: None, allow_changed=True,
    )  # fmt: skip
    return tuning.apply(specs, choices, prof.lr_grid, share)


class _NothingRuns:
    """An executor for :func:`tuning.choose` that refuses to train: exporting reads a finished run."""

    def __init__(self, profile: str, results: Path) -> None:
        self.profile, self.results = profile, results

    def map(self, fn: Any, specs: Sequence[RunSpec], progress: Any) -> Iterator[Any]:
        raise SystemExit(
            f"{self.results}: {len(specs)} learning-rate candidate(s) of profile {self.profile} are neither "
            f"shipped with posenc nor under {self.results / 'tuning'}: export from the directory the "
            f"profile's run wrote (posenc compare --profile {self.profile} --out DIR)"
        )


def export(
    results: Path,
    block: str,
    *,
    profile: Profile | None = None,
    run_info: Path | None = None,
    shipped: Path | None = None,
) -> Path:
    """Copy the records of ``block``'s grid (profile ``block`` unless ``profile``) from ``results``
    into ``benchmarks/records/BLOCK`` (under ``shipped`` when given), replacing what was there, without
    weights; returns that folder.

    ``results`` may hold other profiles' runs too: only the grid's run ids are taken, and every one
    of them must have a valid record. ``run_info`` (default ``results/run.json``) must describe a
    run of the same profile: it is the table's first line."""
    prof = profile or get_profile(block)
    info_path = run_info or results / "run.json"
    if not info_path.is_file():
        raise SystemExit(f"{info_path}: not found (the run's description, written by posenc compare)")
    info = json.loads(info_path.read_text(encoding="utf-8"))
    if info.get("profile") != prof.name:
        raise SystemExit(
            f"{info_path} describes a run of profile {info.get('profile')!r}, not {prof.name!r} (several "
            "profiles run into one directory: pass the block's own run.json with --run-info FILE)"
        )
    specs = grid_specs(prof, results)
    ran = info.get("runs_done", 0) + info.get("runs_resumed", 0)
    if ran > len(specs) or ran + info.get("runs_failed", 0) < len(specs):
        raise SystemExit(
            f"{info_path} describes a run of {ran} run(s), profile {prof.name}'s grid has {len(specs)} (another "
            "invocation on the same directory: pass the block's own run.json with --run-info FILE)"
        )
    store = ResultStore(results)
    files: list[tuple[Path, bytes]] = []
    problems: list[str] = []
    for spec in specs:
        path = store.path_for(spec)
        data, reason = read_record_file(path)
        reason = reason or validate_record(data, spec.run_id)
        if reason is not None:
            problems.append(f"{path.relative_to(results)}: {reason}")
            continue
        files.append((path.relative_to(results), path.read_bytes()))
    if problems:
        raise SystemExit(
            f"{results}: {len(problems)} run(s) of profile {prof.name}'s grid have no valid record "
            f"(first: {problems[0]}); finish the run (rerun the same posenc compare command) first"
        )
    info["command"] = shown_command(info.get("command") or f"posenc compare --profile {prof.name}")
    target_dir = block_dir(block, shipped)
    target_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{block}-", dir=target_dir.parent))
    try:
        for relative, raw in files:
            target = staging / relative.with_name(relative.name + ".gz")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(gzip.compress(raw, compresslevel=9, mtime=0))  # the same bytes every time
        grid = {"profile": prof.name, "run_ids": sorted(json.loads(raw)["run_id"] for _, raw in files)}
        (staging / "grid.json").write_text(json.dumps(grid, indent=1) + "\n", encoding="utf-8")
        (staging / "run.json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
        if target_dir.exists():
            shutil.rmtree(target_dir)
        staging.rename(target_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target_dir


def load(block: str, shipped: Path | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(records, run info)`` of a shipped block, the records in the order ``posenc compare``'s
    reader lists them (by file name). Raises :class:`NotShipped` naming the block when there are
    none, and when a record is not valid or the records are not exactly ``grid.json``'s runs."""
    folder = block_dir(block, shipped)
    ship = f"python scripts/update_benchmark_tables.py --results DIR --block {block} --ship"
    if not (folder / "grid.json").is_file() or not (folder / "run.json").is_file():
        raise NotShipped(
            f"no records shipped for the {block} block ({shown(folder)} has no grid.json and run.json): run "
            f"posenc compare --profile {block} --out DIR, then {ship}"
        )
    grid = json.loads((folder / "grid.json").read_text(encoding="utf-8"))
    info = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    records = []
    version = None  # the benchmark version of the block's run (an earlier one stays published as such)
    for path in sorted(folder.glob(f"runs/*/*{SUFFIX}"), key=lambda p: p.with_suffix("")):
        data, reason = read_record_file(path)  # decompressed, never past MAX_RECORD_BYTES
        version = record_version(data) if version is None and reason is None else version
        reason = reason or _version_problem(data, version) or validate_record(data, version=version or 0)
        if reason is not None:
            raise NotShipped(f"{path}: not a valid record ({reason}); ship the {block} block again: {ship}")
        records.append(data)
    found = [r["run_id"] for r in records]
    wanted = set(grid.get("run_ids", []))
    missing, extra = wanted - set(found), set(found) - wanted
    if missing or extra or len(found) != len(set(found)) or not records:
        raise NotShipped(
            f"{shown(folder)}: the records are not the {block} block's grid ({len(found)} record(s), "
            f"{len(missing)} of the grid's {len(wanted)} runs missing, {len(extra)} not in it); ship it again: {ship}"
        )
    return records, info


def _version_problem(data: Any, version: int | None) -> str | None:
    """Why a record cannot stand in a block of benchmark ``version`` (the block's first record's): a
    version this posenc does not know, or another than the block's."""
    found = record_version(data)
    if found not in BENCHMARK_HISTORY:
        return f"written by benchmark version {found}, which this posenc does not know"
    if found != version:
        return f"written by benchmark version {found}, the block's other records by {version}"
    return None


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is in it (as the messages show it)."""
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)
