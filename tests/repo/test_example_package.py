"""The worked example of docs/your-encoding.md, end to end, as a newcomer runs it.

A copy of ``examples/posenc-mine`` (an encoding, ``mine``, and a task, ``sort``, declared as
entry points) is installed with ``pip install -e`` into a fresh virtual environment that sees
this one's packages (a ``.pth`` file adds them: nothing is downloaded, and this environment is
left as it was). There it shows up in ``posenc list``, passes ``posenc check``, and runs in a
smoke ``posenc compare --encodings mine,rope,alibi,nope`` in spawned local workers and on Ray,
its row in the table with intervals; its records name the class and its distribution's
version, and an edit of the class is refused on resume unless ``--allow-changed`` (an edit
elsewhere in its file is not).
"""

from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "posenc-mine"
TIMEOUT = 900  # seconds per command: generous for a loaded machine


@pytest.fixture(scope="module")
def mine(tmp_path_factory) -> Path:
    """The python of a fresh venv with the example installed editable (returns its interpreter)."""
    root = tmp_path_factory.mktemp("mine")
    package = root / "posenc-mine"
    shutil.copytree(EXAMPLE, package)  # editable installs of a copy: the repository stays clean
    venv.create(root / "venv", with_pip=False)
    python = root / "venv" / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    ours = [p for p in site.getsitepackages() if "site-packages" in p][0]
    Path(purelib, "_posenc_test_parent.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
               "--no-build-isolation", "--no-index", "-e", str(package)]  # fmt: skip
    done = subprocess.run(install, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    return python


def posenc(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), "-c", "from posenc.cli import main; main()", *map(str, args)],
        capture_output=True, text=True, timeout=TIMEOUT,
    )  # fmt: skip


def test_the_example_is_about_forty_lines_of_one_module_shown_whole_in_the_docs():
    module = (EXAMPLE / "posenc_mine.py").read_text()
    assert 30 <= len(module.splitlines()) <= 50
    toml = (EXAMPLE / "pyproject.toml").read_text()
    assert 'mine = "posenc_mine:LogBias"' in toml and 'sort = "posenc_mine:Sort"' in toml
    doc = (EXAMPLE.parent.parent / "docs" / "your-encoding.md").read_text()
    assert (
        f"```python\n{module}```" in doc and f"```toml\n{toml}```" in doc
    )  # the page shows the package as it is


def test_listed_drawn_and_passes_posenc_check(mine):
    listed = posenc(mine, "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["mine"]["kind"] == "bias" and "rope" in rows
    tasks = posenc(mine, "list", "--tasks", "--format", "json")
    assert tasks.returncode == 0, tasks.stderr
    sort = {row["name"]: row for row in json.loads(tasks.stdout)}["sort"]
    assert sort["source"] == "posenc_mine:Sort" and sort["vocab_size"] == 69
    for spec, kind in (("mine", "bias"), ("sort", "task")):
        checked = posenc(mine, "check", spec, "--format", "json")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        report = json.loads(checked.stdout)
        assert report["passed"] and report["kind"] == kind
        assert {r["status"] for r in report["results"]} <= {"PASS", "SKIP"}
        assert sum(r["status"] == "PASS" for r in report["results"]) >= 6
    drawn = posenc(mine, "plot", "mine", "--kind", "bias", "-o", mine.parent.parent.parent / "mine-bias.png")
    assert drawn.returncode == 0 and (mine.parent.parent.parent / "mine-bias.png").stat().st_size > 1000, (
        drawn.stderr
    )


def _compare(mine: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return posenc(
        mine, "compare", "--profile", "smoke", "--encodings", "mine,rope,alibi,nope", "--tasks", "sort",
        # smoke trains 6 steps: call every run converged so that the table has numbers
        "--set", "task_train.converge_at=0", "--out", out, "--no-report", "--format", "json", *extra,
    )  # fmt: skip


def _numbers(out: Path) -> dict[str, list]:
    found = {}
    for path in (out / "runs").glob("*/*.json"):
        record = json.loads(path.read_text())
        found[record["run_id"]] = record["result"]["eval"]["default"]["exact_match"]
    return found


def test_compare_locally_and_on_ray_then_refuse_an_edited_class(mine, tmp_path):
    local = _compare(mine, tmp_path / "local", "--workers", "2")  # spawned workers find the entry points
    assert local.returncode == 0, local.stderr
    data = json.loads(local.stdout)
    assert data["outcome"]["done"] == 12 and not data["outcome"]["failed"]  # 4 encodings x 3 seeds
    row = data["summary"]["rows"]["mine"]
    cell = row["sort:em_in"]
    assert cell["runs"] == 3 and cell["low"] <= cell["mean"] <= cell["high"]  # a mean with its interval
    assert {"mine", "rope", "alibi", "nope"} <= set(data["summary"]["rows"])
    record = json.loads(next((tmp_path / "local" / "runs" / "sort").glob("mine__seed0__*.json")).read_text())
    code = record["result"]["code"]
    assert code["encodings"]["mine"]["class"] == "posenc_mine:LogBias"
    assert code["encodings"]["mine"]["distribution"] == "posenc-mine"
    assert code["encodings"]["mine"]["version"] == "0.1.0"
    assert code["task"]["class"] == "posenc_mine:Sort" and len(code["task"]["source_sha256"]) == 64

    pytest.importorskip("ray")
    ray = _compare(mine, tmp_path / "ray", "--seeds", "0,1", "--workers", "2", "--executor", "ray")
    assert ray.returncode == 0, ray.stderr
    data = json.loads(ray.stdout)
    assert data["outcome"]["done"] == 8 and data["summary"]["rows"]["mine"]["sort:em_in"]["runs"] == 2
    on_ray, here = _numbers(tmp_path / "ray"), _numbers(tmp_path / "local")
    assert on_ray and all(
        here[run_id] == numbers for run_id, numbers in on_ray.items()
    )  # same runs, same numbers

    source = mine.parent.parent.parent / "posenc-mine" / "posenc_mine.py"
    source.write_text(source.read_text() + "\n# an edit after the runs, in no class\n")
    resumed = _compare(mine, tmp_path / "local")  # the classes did not change: nothing to refuse
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["outcome"]["skipped"] == 12
    source.write_text(source.read_text().replace("return -self.slopes", "return 0.0 - self.slopes"))
    refused = _compare(mine, tmp_path / "local")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert lines[-1].startswith("posenc: error:") and "Traceback" not in refused.stderr, refused.stderr
    assert all(line.startswith("contract: ") for line in lines[:-1]), refused.stderr  # checked first
    assert "encoding 'mine' (posenc_mine:LogBias): its code changed" in lines[-1]
    assert "(3 run(s)" in lines[-1] and "--allow-changed" in lines[-1]  # mine's runs, not the others'
    kept = _compare(mine, tmp_path / "local", "--allow-changed")
    assert kept.returncode == 0, kept.stderr
    assert json.loads(kept.stdout)["outcome"]["skipped"] == 12
