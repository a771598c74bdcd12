"""The lock and the test extra less one upstream and what it pins itself (scripts/test_upstream.sh).

    python scripts/upstream_lock.py VENV_PYTHON PACKAGE LOCK_OUT TESTS_OUT

reads which packages the PACKAGE installed in the environment of VENV_PYTHON requires (not its
extras), then writes LOCK_OUT (constraints.txt without PACKAGE and those) and TESTS_OUT (the
requirements of pyproject.toml's test extra without them, one a line): torch 2.15 requires
triton 3.9, while the test extra's triton range is the one the locked torch was built with.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
REQUIRES = (
    "import importlib.metadata as m, sys; "
    "print('\\n'.join(r for r in m.requires(sys.argv[1]) or [] if 'extra ==' not in r))"
)


def name(requirement: str) -> str:
    """A requirement's (or a lock line's) normalized distribution name."""
    return re.split(r"[ ;<>=!~\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def main(python: str, package: str, lock_out: str, tests_out: str) -> None:
    found = subprocess.run([python, "-c", REQUIRES, package], check=True, capture_output=True, text=True)
    pinned = {name(package), *(name(r) for r in found.stdout.splitlines() if r.strip())}
    lock = (ROOT / "constraints.txt").read_text().splitlines(keepends=True)
    Path(lock_out).write_text("".join(line for line in lock if name(line) not in pinned))
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    kept = [r for r in extras["test"] if name(r) not in pinned and name(r) != "posenc"]
    Path(tests_out).write_text("".join(f"{r}\n" for r in kept))
    print(
        f"left out of the lock and the test extra (what {package} pins itself): {', '.join(sorted(pinned))}"
    )


if __name__ == "__main__":
    main(*sys.argv[1:5])
