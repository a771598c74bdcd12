"""Measure which bias-attention path is fastest on a device: the rules of posenc/kernels/bias_paths.json.

For each case (encoding, mode, dtype, key length) this times posenc's three bias paths on the
device, in interleaved rounds (median; CUDA calls synchronised): ``chunked`` (row-blocked SDPA),
``flex`` (compiled FlexAttention with the encoding's score_mod; its compile is paid in a warm-up
call, not timed) and ``dense`` (the whole bias to SDPA). Causal self-attention, batch 1, 8 heads,
head_dim 64, as the speed race's bias section. Before a path is timed its output (and, for
``fwd+bwd``, the gradients of q, k, v and of the encoding's parameters) is compared with the
float64 result of the chunked path: a path whose error is more than twice the float32/bfloat16
chunked path's own (and above a floor per dtype), or that fails, is reported and never chosen.

Prints one line per case and writes a JSON report (``--out``): the device, torch's version, the
times, and the rules :func:`posenc.kernels.bias_paths.rules_from_times` makes of them (the fastest
correct path per length). ``--write-table FILE`` also puts this device's rules into a table file
(posenc's own is src/posenc/kernels/bias_paths.json: check the report, then write it there).
``--budget`` stops measuring new cases after that many seconds (cases are ordered: dtype by dtype
as given, forward before forward+backward, then encodings and lengths as given), so a short GPU
lease yields what it could measure; the rest keep the chunked path. The report and the table are
written after every case, so a run stopped from outside keeps what it measured.

Usage:
    python benchmarks/bias_paths.py --device cuda [--encodings alibi,t5 | bias] [--lengths 1024,4096]
        [--modes fwd,fwd+bwd] [--dtypes bfloat16,float32] [--paths chunked,flex,dense]
        [--repeats 5] [--budget 240] [--out bias-paths.json] [--write-table FILE]
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import posenc
from posenc.kernels import bias_paths
from posenc.kernels.bias_attention import _try_flex, bias_attention

HEADS, HEAD_DIM = 8, 64
#: error floor (relative to each tensor's scale, see _disagreement) below which a path is never refused
TOLERANCE = {torch.float32: 2e-4, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _case(name: str, length: int, dtype: torch.dtype, device: torch.device, backward: bool, seed: int = 0):
    """The encoding (its parameters jittered off their initial values) and q, k, v, grad."""
    torch.manual_seed(seed)
    enc = posenc.build_for_model(name, d_model=HEADS * HEAD_DIM, num_heads=HEADS).to(device)
    with torch.no_grad():
        for p in enc.parameters():
            p.add_(0.05 * torch.randn_like(p))
    enc.requires_grad_(backward)
    g = torch.Generator().manual_seed(seed)
    q, k, v, grad = (torch.randn(1, HEADS, length, HEAD_DIM, generator=g).to(device, dtype) for _ in range(4))
    return enc, [t.requires_grad_(backward) for t in (q, k, v)], grad


def _runner(path: str, enc, qkv, grad, backward: bool):
    """One call of ``path``: its output and, for backward, the gradients (q, k, v, parameters)."""
    params = [p for p in enc.parameters() if p.requires_grad]

    def run():
        if path == "flex":  # FlexAttention itself, never bias_attention's fallback to the chunked path
            out = _try_flex(*qkv, enc, None, None, None, True, 0.0, say=False)
            if out is None:
                raise RuntimeError("FlexAttention cannot take this case here (posenc would run chunked)")
        else:
            out = bias_attention(*qkv, enc, causal=True, path=path)
        if not backward:
            return [out]
        return [out, *torch.autograd.grad(out, [*qkv, *params], grad)]

    return run


def _disagreement(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    """The largest difference of any output or gradient, relative to that tensor's largest value
    (at least 1): parameter gradients are sums over every score, far from unit scale."""
    worst = 0.0
    for a, b in zip(got, want):
        a, b = a.detach().float(), b.detach().float()
        worst = max(worst, float((a - b).abs().max()) / max(1.0, float(b.abs().max())))
    return worst


def measure_case(
    name: str, mode: str, dtype: torch.dtype, length: int, paths: list[str], device, repeats: int
):
    """``{"ms": {path: median}, "wrong": {path: why}}`` for one case."""
    backward = mode == "fwd+bwd"
    enc, qkv, grad = _case(name, length, dtype, device, backward)
    runs = {p: _runner(p, enc, qkv, grad, backward) for p in paths}
    wide = [t.detach().double().requires_grad_(backward) for t in qkv]
    exact = _runner("chunked", copy.deepcopy(enc).double(), wide, grad.double(), backward)
    result: dict = {"ms": {}, "wrong": {}}
    with torch.set_grad_enabled(backward):
        reference = exact()
        floor = max(TOLERANCE[dtype], 2 * _disagreement(runs["chunked"](), reference))
        live = {}
        for path, run in runs.items():
            try:
                got = run()  # the warm-up: FlexAttention compiles here
                _sync(device)
            except Exception as exc:  # noqa: BLE001 - a path that fails is reported, never chosen
                result["wrong"][path] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
                continue
            err = _disagreement(got, reference)
            if not err <= floor:
                result["wrong"][path] = f"error {err:.3g} (relative, vs float64), allowed {floor:.3g}"
                continue
            live[path] = run
        times: dict[str, list[float]] = {p: [] for p in live}
        for _ in range(repeats):
            for path, run in live.items():
                _sync(device)
                t0 = time.perf_counter()
                run()
                _sync(device)
                times[path].append(time.perf_counter() - t0)
    result["ms"] = {p: 1e3 * statistics.median(ts) for p, ts in times.items()}
    return result


def cases(args) -> list[tuple[str, str, str, int]]:
    """(encoding, mode, dtype, length) in the order they are measured: dtype by dtype (training's
    bfloat16 first, as given), forward then forward+backward, encodings and lengths as given."""
    return [
        (e, m, d, n) for d in args.dtypes for m in args.modes for e in args.encodings for n in args.lengths
    ]


def rules(report: dict) -> list[dict]:
    """The table rules of a report's measured cases."""
    grouped: dict[tuple, dict[int, dict[str, float]]] = {}
    for c in report["cases"]:
        if "ms" in c:
            grouped.setdefault((c["class"], c["mode"], c["dtype"]), {})[c["length"]] = c["ms"]
    out = []
    for (cls, mode, dtype), times in grouped.items():
        out += [vars(r) for r in bias_paths.rules_from_times(cls, mode, dtype, times)]
    return out


def write_table(path: Path, device: str, measured: str, found: list[dict]) -> None:
    """Put ``device``'s rules into the table file ``path`` (checked by posenc's own parser)."""
    table = (
        json.loads(path.read_text()) if path.exists() else {"about": "bias-attention paths", "devices": {}}
    )
    table["devices"][device] = {"measured": measured, "rules": found}
    bias_paths.parse(table, str(path))  # refuse to write what posenc would refuse to read
    path.write_text(json.dumps(table, indent=1) + "\n")


def _parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    split = lambda text: [x for x in text.split(",") if x]  # noqa: E731
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--encodings", type=split, default=split("bias"))
    parser.add_argument("--lengths", type=lambda t: [int(x) for x in split(t)], default=[1024, 4096])
    parser.add_argument("--modes", type=split, default=list(bias_paths.MODES))
    parser.add_argument("--dtypes", type=split, default=["bfloat16", "float32"])
    parser.add_argument("--paths", type=split, default=list(bias_paths.PATHS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget", type=float, default=float("inf"), help="seconds; later cases are skipped")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--write-table", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.encodings == ["bias"]:
        args.encodings = [n for n, c in posenc.ENCODINGS.items() if c.kind == "bias"]
    for what, given, valid in (("--modes", args.modes, bias_paths.MODES), ("--dtypes", args.dtypes, bias_paths.DTYPES),
                               ("--paths", args.paths, bias_paths.PATHS)):  # fmt: skip
        bad = [x for x in given if x not in valid]
        if bad:
            parser.error(f"{what} must be among {list(valid)}, got {bad}")
    if "chunked" not in args.paths:
        parser.error("--paths must include chunked (the reference every other path is checked against)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    device = torch.device(args.device)
    name = bias_paths.device_name(device) or f"{device.type} (not a CUDA device: a dry run)"
    measured = (f"{_dt.date.today().isoformat()}, torch {torch.__version__}, "
                f"python benchmarks/bias_paths.py {' '.join(argv if argv is not None else sys.argv[1:])}")  # fmt: skip
    report: dict = {"device": name, "measured": measured, "cases": [], "rules": []}
    start = time.perf_counter()
    for enc, mode, dtype, length in cases(args):
        cls = type(posenc.build_for_model(enc, d_model=HEADS * HEAD_DIM, num_heads=HEADS)).__name__
        case = {"encoding": enc, "class": cls, "mode": mode, "dtype": dtype, "length": length}
        if time.perf_counter() - start > args.budget:
            case["skipped"] = f"past the {args.budget:g} s budget"
        else:
            case.update(
                measure_case(enc, mode, bias_paths.DTYPES[dtype], length, args.paths, device, args.repeats)
            )
        report["cases"].append(case)
        cells = ", ".join(f"{p} {ms:.3f} ms" for p, ms in case.get("ms", {}).items())
        wrong = "; ".join(f"{p}: {why}" for p, why in case.get("wrong", {}).items())
        print(f"{enc:12} {mode:7} {dtype:8} L {length:5}: {cells or case.get('skipped', '')}"
              + (f"  [{wrong}]" if wrong else ""), flush=True)  # fmt: skip
        report["rules"] = rules(report)  # written after every case: a run stopped from outside keeps them
        if args.out:
            args.out.write_text(json.dumps(report, indent=1) + "\n")
        if args.write_table:
            write_table(args.write_table, name, measured, report["rules"])
    print(
        f"rules for {name}: "
        + (json.dumps(report["rules"]) if report["rules"] else "none (chunked everywhere)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
