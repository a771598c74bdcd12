#!/usr/bin/env bash
# Install posenc with its test extras (and headless chromium for the report's browser
# test), then lint, type-check src/ (mypy, configured in pyproject.toml) and run the whole
# test suite. This is the README's test command and exactly what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
POSENC_EXTRAS="${POSENC_EXTRAS:-test,peers,ray,real}" bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
    || echo "warning: could not install chromium; the browser test will fail" >&2
fi
.venv/bin/ruff check src tests
.venv/bin/ruff format --check src tests
.venv/bin/mypy  # files = ["src"] and the checks are in pyproject.toml's [tool.mypy]
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
# pytest exits 5 when no test was collected: that is a failure for posenc.
if [ "$rc" -eq 5 ]; then echo "no tests were collected" >&2; exit 1; fi
exit "$rc"
