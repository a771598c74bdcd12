"""Two ``posenc extend`` processes on one ``--out`` at the same time (real processes, a tiny random
Llama): no cell is computed by both, each ends with every number of its own grid, and each keeps its
own protocol, summary and run info (found: shared cells were computed twice, and the last to finish
overwrote the other's summary.json/.md, protocol.toml and run.json)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.extend_models import tiny_llama

from posenc.extend import protocol as protocols

pytest.importorskip("transformers")

# posenc extend in this process, each cell logged as it starts; the first invocation holds its first
# cell until the second has claimed its own and started computing (a file says so), so that the two
# overlap on any machine. One worker runs cells inline, in the process that claimed them.
RUNNER = """
import os, sys, time
from pathlib import Path
import posenc.extend as extend
from posenc.cli import main

log, wait_for, touch, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
compute = extend.execute

def logged(cell, *rest):
    with open(log, "a") as handle:
        handle.write(cell.run_id + "\\n")
    if touch != "-":
        Path(touch).touch()
    deadline = time.time() + 300
    while wait_for != "-" and not Path(wait_for).exists() and time.time() < deadline:
        time.sleep(0.1)
    return compute(cell, *rest)

extend.execute = logged
main(["extend", *args])
"""


def _start(model: Path, out: Path, log: Path, scalings: str, wait_for: str, touch: str) -> subprocess.Popen:
    args = ["--model", str(model), "--device", "cpu", "--lengths", "32,64", "--passkey-lengths", "", "--documents",
            "2", "--scalings", scalings, "--chunk", "64", "--workers", "1", "--no-figures", "--format", "json",
            "--out", str(out)]  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", RUNNER, str(log), wait_for, touch, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.slow
def test_two_invocations_on_one_out_share_cells_and_keep_their_own_files(tmp_path, monkeypatch):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    model = tiny_llama(tmp_path / "model")
    out = tmp_path / "out"
    logs = tmp_path / "a.log", tmp_path / "b.log"
    go = tmp_path / "go"
    first = _start(model, out, logs[0], "none,linear:2", str(go), "-")  # 2 tables x 2 documents: 4 cells
    deadline = time.time() + 120
    while not logs[0].exists() and time.time() < deadline:  # the first has claimed its cells
        time.sleep(0.1)
    second = _start(model, out, logs[1], "none,yarn:2", "-", str(go))  # shares plain RoPE's 2 cells
    outputs = [process.communicate(timeout=600) for process in (first, second)]
    for process, (_, stderr) in zip((first, second), outputs):
        assert process.returncode == 0, stderr[-3000:]
    computed = [line for log in logs for line in log.read_text().split()]
    assert len(computed) == len(set(computed)) == 6, computed  # 4 + 2: no cell computed twice
    assert "being computed by another posenc extend" in outputs[1][1]
    results = [json.loads(stdout[stdout.index("{") :]) for stdout, _ in outputs]
    assert [r["done"] + r["resumed"] for r in results] == [4, 4] and [r["failed"] for r in results] == [
        [],
        [],
    ]
    none = [r["summary"]["perplexity"]["none"] for r in results]
    assert none[0] == none[1] and set(none[0]) == {"32", "64"}  # the second has the first's numbers
    directories = sorted((out / "invocations").iterdir())
    assert len(directories) == 2
    for directory in directories:
        summary = json.loads((directory / "summary.json").read_text())
        labels = [entry["label"] for entry in summary["entries"]]
        assert labels in (["none", "linear x2"], ["none", "yarn x2"])
        scalings = protocols.load(str(directory / "protocol.toml")).scalings
        assert scalings == ("none", "linear:2" if labels[1] == "linear x2" else "yarn:2")
        assert json.loads((directory / "run.json").read_text())["cells_failed"] == 0
    last = json.loads((out / "run.json").read_text())["invocation"]
    assert (out / "summary.json").read_text() == (out / last / "summary.json").read_text()
    assert (out / "protocol.toml").read_text() == (out / last / "protocol.toml").read_text()
    assert not list((out / "cells").glob("*.claim"))
