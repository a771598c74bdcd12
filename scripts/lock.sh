#!/usr/bin/env bash
# Rewrite constraints.txt from the test environment (.venv with the test, peers, ray and real
# extras): run after the suite has passed on the versions it should lock.
set -euo pipefail
cd "$(dirname "$0")/.."
head -n 3 constraints.txt > constraints.txt.new
.venv/bin/python -m pip freeze --exclude-editable --disable-pip-version-check \
  | grep -v '^posenc' | sed 's/^torch==\([0-9.]*\)+cpu$/torch==\1/' >> constraints.txt.new
mv constraints.txt.new constraints.txt
