#!/usr/bin/env bash
# Run posenc's transformers tests against another transformers release than the one
# constraints.txt locks, and record its column of docs/hf-support.md:
#   bash scripts/test_upstream.sh           # the newest release on the package index
#   bash scripts/test_upstream.sh 5.0.0     # a given release (5.0.0: the oldest supported)
# It builds its own environment (.venv-transformers-VERSION: everything else as locked, then
# that transformers with whatever it needs), runs the hf tests, then scripts/hf_support.py.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${1:-newest}"
if [ "$version" = newest ]; then
  version=$(python3 -m pip index versions transformers 2>/dev/null | sed -n 's/^transformers (\(.*\))$/\1/p')
  [ -n "$version" ] || { echo "could not read the newest transformers from the package index" >&2; exit 2; }
fi
shift || true
venv=".venv-transformers-$version"
locked=$(mktemp)
trap 'rm -f "$locked"' EXIT
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
