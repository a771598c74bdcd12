#!/usr/bin/env bash
# posenc's checks on a CUDA machine, in one run of about 10 minutes (each step has its own limit):
#   1. the CUDA tests (tests/gpu/test_cuda.py: every encoding, the KV cache, bf16, posenc.hf and posenc
#      extend on the GPU against the CPU; the Triton rotary kernel bit for bit against the plain path;
#      every bias path (chunked, FlexAttention, dense) against float64; the compare smoke profile on CUDA);
#   2. the speed races of RoPE and the bias encodings on the GPU (benchmarks/run_speed.py --device cuda);
#   3. the bias-path measurements (benchmarks/bias_paths.py): chunked vs FlexAttention vs dense per
#      encoding, length, dtype, forward and forward+backward, each path checked against float64 first;
#      they print the rules for posenc/kernels/bias_paths.json and write them to OUT/bias_paths.json
#      (a table with this device's entry: check it, then copy the entry into the repository's table);
#   4. posenc compare on the GPU: the quick profile's protocol for two encodings on copy, one seed;
#   5. the FlexAttention sweep on CUDA for the bias encodings (tests/flex_sweep.py; a compile per padded
#      shape: its result may be missing when its limit is reached).
# Each step writes its output under OUT (default ./gpu-check); a step that fails or runs out of time is
# reported and the next one runs.
#
# Usage: bash scripts/gpu_check.sh [OUT]
# Needs: a CUDA build of PyTorch (it brings triton) and posenc's cli + test extras (transformers for the
# posenc.hf and extend tests); run from a checkout (PYTHONPATH is set to its src/ here).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu-check}}"
mkdir -p "$out"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py="${PYTHON:-python3}"
export POSENC_TEST_DEVICE="${POSENC_TEST_DEVICE:-cuda}"  # cpu: a dry run of this script where there is no GPU
dev="$POSENC_TEST_DEVICE"

step() {  # step NAME LIMIT_S COMMAND...: run with a time limit, output to OUT/NAME.txt, say how it went
  local name="$1" limit="$2"
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  local how="exit $rc"
  [ "$rc" -eq 124 ] && how="stopped at its ${limit} s limit"
  echo "== $name: $how after $((SECONDS - start)) s"
  tail -n 4 "$out/$name.txt"
}

{
  nvidia-smi -L
  "$py" -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, \
'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(), 'transformers', transformers.__version__)"
  nproc
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

step tests 170 "$py" -m pytest -q -p no:cacheprovider -o addopts="-ra" tests/gpu/test_cuda.py \
  tests/unit/compare/test_device.py
step speed 110 "$py" benchmarks/run_speed.py --quick --device "$dev" --section rope --section bias \
  --out "$out/speed-records"
mv "$out"/speed-records/speed-quick-*.json "$out/speed.json" 2>/dev/null
[ -f "$out/speed.json" ] && "$py" - "$out/speed.json" <<'EOF'
import json, sys
record = json.load(open(sys.argv[1]))
print(record["machine"].get("gpu"), "torch", record["machine"]["versions"]["torch"])
for section in ("rope", "bias"):
    for group in record.get(section, []):
        case = " ".join(str(x) for x in (group.get("encoding", ""), "x".join(map(str, group["shape"])),
                                         group.get("dtype", ""), group["mode"]) if x)
        for name, r in group["results"].items():
            ratio = r.get("x_roofline", r.get("x_floor"))
            print(f"{section:5} {case:32} {name:34} "
                  + (f"{r['ms']:9.3f} ms  x{ratio:.2f}" if "ms" in r else r.get("skipped", "")))
EOF
# the bias paths: most-used encodings first; what the budget leaves unmeasured keeps the chunked path
step bias-paths 190 "$py" benchmarks/bias_paths.py --device "$dev" --encodings alibi,t5,fire \
  --lengths 512,2048,8192 --dtypes bfloat16,float32 --repeats 5 --budget 150 --out "$out/bias-paths.json" \
  --write-table "$out/bias_paths.json"
grep -v "^rules for" "$out/bias-paths.txt" 2>/dev/null | tail -n 40
step compare 80 "$py" -c 'import sys; from posenc.cli import main; sys.exit(main())' compare --profile quick --encodings rope,alibi --tasks copy --seeds 0 \
  --device "$dev" --workers 4 --no-report --out "$out/compare"
cp "$out/compare/runs.csv" "$out/runs.csv" 2>/dev/null
step flex 50 "$py" tests/flex_sweep.py --device "$dev" --encodings alibi,t5,fire --lengths 1-20,127,128,129,255,256,257
rm -rf "$out/compare" "$out/speed-records"
