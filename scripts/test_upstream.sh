#!/usr/bin/env bash
# Run posenc's tests against another release of an upstream than the one constraints.txt locks.
#
# transformers (records its column of docs/hf-support.md):
#   bash scripts/test_upstream.sh           # the newest release on the package index
#   bash scripts/test_upstream.sh 5.0.0     # a given release (5.0.0: the oldest supported)
# It builds its own environment (.venv-transformers-VERSION: everything else as locked, then
# that transformers with whatever it needs), runs the hf tests, then scripts/hf_support.py.
#
# torch (the whole suite; docs/guarantees.md keeps what was found):
#   bash scripts/test_upstream.sh --torch newest      # the newest torch on the package index
#   bash scripts/test_upstream.sh --torch 2.15.0 [PYTEST ARGS]
# It builds .venv-torch-VERSION: that torch first, with whatever it requires (from the package
# index: the CUDA build on Linux, whose CUDA libraries are installed but not needed on a CPU), then
# posenc's test extras with everything else as locked (the lock and the test extra less torch and
# what that torch pins itself, by scripts/upstream_lock.py: the test extra's triton range is the one
# the locked torch was built with), and runs the whole suite (or PYTEST ARGS) with nice -n 10.
# A pip configuration that caps torch (a constraint file of the machine's) must be lifted for the
# run: PIP_CONFIG_FILE=/dev/null bash scripts/test_upstream.sh --torch 2.15.0. The script refuses
# to test a torch other than the one asked for.
set -euo pipefail
cd "$(dirname "$0")/.."

newest() {
  local found
  found=$(python3 -m pip index versions "$1" 2>/dev/null | sed -n "s/^$1 (\(.*\))$/\1/p")
  [ -n "$found" ] || { echo "could not read the newest $1 from the package index" >&2; exit 2; }
  echo "$found"
}

locked=$(mktemp)
trap 'rm -f "$locked"' EXIT

if [ "${1:-}" = --torch ]; then
  version="${2:-newest}"
  [ "$version" = newest ] && version=$(newest torch)
  shift 2 || shift || true
  venv=".venv-torch-$version"
  echo "torch $version in $venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  check_torch() {
    local got
    got=$("$venv/bin/python" -c "import torch; print(torch.__version__.split('+')[0])")
    if [ "$got" != "$version" ]; then
      echo "$venv has torch $got, not $version: does a pip configuration cap torch here? (PIP_CONFIG_FILE=/dev/null)" >&2
      exit 2
    fi
  }
  "$venv/bin/python" -m pip install --disable-pip-version-check -q "torch==$version"
  check_torch
  # The lock and the test extra less torch and what this torch pins itself (triton, the CUDA
  # libraries; the test extra's triton range is the one the locked torch was built with).
  tests=$(mktemp)
  trap 'rm -f "$locked" "$tests"' EXIT
  python3 scripts/upstream_lock.py "$venv/bin/python" torch "$locked" "$tests"
  POSENC_VENV="$venv" POSENC_EXTRAS=cli,peers,ray,real POSENC_CONSTRAINTS="$locked" \
    POSENC_TORCH="torch==$version" bash scripts/setup.sh
  "$venv/bin/python" -m pip install --disable-pip-version-check -q -c "$locked" -r "$tests"
  check_torch
  "$venv/bin/python" -c "import torch, posenc; print('torch', torch.__version__, '| posenc from', posenc.__file__)"
  set +e
  nice -n 10 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
  exit $?
fi

version="${1:-newest}"
[ "$version" = newest ] && version=$(newest transformers)
shift || true
venv=".venv-transformers-$version"
grep -v '^transformers==' constraints.txt > "$locked"
echo "transformers $version in $venv"
POSENC_VENV="$venv" POSENC_EXTRAS=test,peers POSENC_CONSTRAINTS="$locked" bash scripts/setup.sh
"$venv/bin/python" -m pip install --disable-pip-version-check -q "transformers==$version"
set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/hf/test_hf_models.py tests/hf/test_hf_parity.py tests/unit/conform/test_vectors.py \
  tests/unit/conform/test_mrope_vectors.py tests/hf/test_multiaxis_peers.py "$@"
rc=$?
set -e
"$venv/bin/python" scripts/hf_support.py
exit "$rc"
