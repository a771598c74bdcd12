"""The files of ``posenc conform export``: the manifest and each case's arrays, written atomically
(:func:`export`), and read back with the schema checked (:func:`load`); the format:
:mod:`posenc.conform.vectors` and docs/conformance.md."""

from __future__ import annotations

import functools
import json
import os
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from posenc.conform.vector_cases import MAX_MANIFEST_BYTES, SCHEMA, TOLERANCES, cases, config_cases, golden
from posenc.core.errors import PosencError

# ---------------------------------------------------------------------------
# Files.
# ---------------------------------------------------------------------------


def _replace(path: Path, write: Callable[[Any], None], mode: str) -> None:
    """Write through a temporary file in the same folder, then rename: readers never see half a
    file, and two exports into one folder leave one complete set (the files are the same)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, mode) as handle:  # the process umask applies, as for any file the user writes
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _savez(handle: Any, *, arrays: dict[str, np.ndarray]) -> None:
    np.savez(handle, **arrays)  # type: ignore[arg-type]  # numpy types allow_pickle among **kwds


def _dump(handle: Any, *, data: Any, indent: int | None = None) -> None:
    json.dump(data, handle, indent=indent)


def export(directory: str | Path, *, hf_config: Any = None) -> Path:
    """Write the manifest and every case's arrays under ``directory``; returns the manifest path.

    With ``hf_config`` (a ``config.json`` path, dict or config object) only that model's RoPE
    cases (:func:`config_cases`) are written, instead of every scaling and preset."""
    root = Path(directory)
    chosen = cases() if hf_config is None else config_cases(hf_config)
    (root / "cases").mkdir(parents=True, exist_ok=True)
    entries = []
    for case in chosen:
        arrays = golden(case)
        lists = {key: value.tolist() for key, value in arrays.items()}
        _replace(root / "cases" / f"{case.name}.npz", functools.partial(_savez, arrays=arrays), "wb")
        _replace(root / "cases" / f"{case.name}.json", functools.partial(_dump, data=lists), "w")
        entries.append({**case.to_dict(), "arrays": sorted(arrays)})
    manifest = {
        "schema": SCHEMA,
        "generator": "posenc conform export (float64 NumPy references, posenc.reference)",
        "tolerances": TOLERANCES,
        "tolerance_rule": "see docs/conformance.md: |got - want| <= bound(quantity, dtype) element-wise",
        "cases": entries,
    }
    path = root / "manifest.json"
    _replace(path, functools.partial(_dump, data=manifest, indent=1), "w")
    return path


def load(directory: str | Path) -> tuple[dict[str, Any], Callable[[str], dict[str, np.ndarray]]]:
    """``(manifest, arrays_of(case name))`` of an export; checks the schema."""
    root = Path(directory)
    path = root / "manifest.json"
    if not path.is_file():
        raise PosencError(f"{root} has no manifest.json; run `posenc conform export {root}` first")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise PosencError(
            f"{path} is larger than {MAX_MANIFEST_BYTES >> 20} MiB: not a posenc conform manifest"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PosencError(f"{path} is not valid JSON ({exc}); export the vectors again") from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA:
        found = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise PosencError(f"{path} has schema {found!r}; expected {SCHEMA!r}")

    def arrays_of(name: str) -> dict[str, np.ndarray]:
        case = root / "cases" / f"{name}.npz"
        try:
            with np.load(case, allow_pickle=False) as data:
                return {key: data[key] for key in data.files}
        except (ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise PosencError(
                f"{case} is damaged ({type(exc).__name__}: {exc}); export the vectors again"
            ) from None

    return manifest, arrays_of
