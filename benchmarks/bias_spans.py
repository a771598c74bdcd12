"""Causal bias attention on the CPU: row blocks against spans, raced in one process.

The chunked bias path (``posenc.kernels.blocked``) runs a causal Toeplitz bias (ALiBi, T5,
KERPLE, Sandwich) on SDPA's CPU flash kernel. In row blocks, each block computes its whole square
next to the diagonal (the kernel skips masked tiles only under ``is_causal``, which takes no
bias); in spans (``causal_spans``), the keys all of a span's queries see go in one call and the
rest in small pieces, merged by their log-sum-exps. This times, forward only, for each length:
unbiased causal SDPA (the floor), the row blocks the path plans, the same blocks' SDPA calls
without bias or mask (what the blocks cost by themselves; not attention), and spans of each
``--spans ROWS/PIECE`` setting, interleaved in rounds (each timed call after one untimed call of
it, the garbage collector off while timing), medians over rounds, with the speed race's steady
allocator; ``--backward`` times forward and backward (into q, k, v and the encoding's parameters,
as the speed race does; the bare calls are left out). It is how ``SPAN_ROWS`` and ``PIECE_ROWS``
were chosen; run it on an idle machine.

Usage: python benchmarks/bias_spans.py [--length N ...] [--encoding alibi|t5 ...]
       [--spans ROWS/PIECE ...] [--rounds N] [--backward]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys

import speed  # benchmarks/, next to this file: the steady allocator
import torch
import torch.nn.functional as F

import posenc
from posenc.kernels import blocked
from posenc.kernels.bias_attention import _plan, bias_attention

HEADS, HEAD_DIM = 8, 64  # the speed race's bias shapes: (1, 8, L, 64) float32


@contextlib.contextmanager
def span_settings(rows: int, piece: int):
    """``blocked.SPAN_ROWS`` and ``PIECE_ROWS`` set for the block, restored after (0 rows: no spans)."""
    saved = blocked.SPAN_ROWS, blocked.PIECE_ROWS
    blocked.SPAN_ROWS, blocked.PIECE_ROWS = rows, piece
    try:
        yield
    finally:
        blocked.SPAN_ROWS, blocked.PIECE_ROWS = saved


def contenders(q, k, v, encoding, spans: list[tuple[int, int]], backward: bool = False) -> dict:
    """``{label: call}``: the floor, the planned row blocks, and spans per ``(rows, piece)``, each
    through ``bias_attention(..., causal=True, path="chunked")``; with ``backward``, a forward and a
    backward into q, k, v and the encoding's parameters, as in the speed race."""
    plan = _plan(q, k, encoding, None, None, None, True, None)
    grad = torch.randn(q.shape, generator=torch.Generator().manual_seed(4))

    def step(out: torch.Tensor) -> torch.Tensor:
        if backward and torch.is_grad_enabled():
            out.backward(grad)
        return out.detach()

    def attend(rows: int, piece: int = blocked.PIECE_ROWS):
        def call():
            with span_settings(rows, piece):  # rows 0: the row blocks as planned
                return step(bias_attention(q, k, v, encoding, causal=True, path="chunked"))

        return call

    rows = plan.blocks[0][1] - plan.blocks[0][0]

    def bare_blocks():  # the blocks' calls alone: no bias, no mask (wrong attention, timing only)
        for start, stop, keys in plan.blocks:
            F.scaled_dot_product_attention(q[:, :, start:stop], k[:, :, :keys], v[:, :, :keys])

    out = {
        "unbiased causal SDPA": lambda: step(F.scaled_dot_product_attention(q, k, v, is_causal=True)),
        f"row blocks of {rows}": attend(0),
    }
    if not backward:
        out["the blocks, no bias/mask"] = bare_blocks
    i, j = q.shape[2], k.shape[2]
    for span_rows, piece in spans:
        with span_settings(span_rows, piece):  # the pieces as the path cuts them (at most the planned rows)
            first = blocked.causal_spans(i, j, rows)[0].pieces[0]
        out[f"spans {span_rows}/{first[1] - first[0]}"] = attend(span_rows, piece)
    return out


def check(cases: dict) -> None:
    """Every spans contender gives the row blocks' attention (float32 rounding apart) before it is timed."""
    with torch.no_grad():
        blocks = next(call for label, call in cases.items() if label.startswith("row blocks"))()
        for label, call in cases.items():
            if not label.startswith("spans"):
                continue
            try:
                torch.testing.assert_close(call(), blocks, rtol=1e-4, atol=1e-5)
            except AssertionError as error:
                lines = str(error).splitlines()
                raise SystemExit(
                    f"bias_spans.py: {label} differs from the row blocks ({lines[-2].strip()})"
                ) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, action="append", default=None, help="default: 1024 2048 4096")
    parser.add_argument("--encoding", action="append", choices=["alibi", "t5"], default=None)
    parser.add_argument("--spans", action="append", default=None, metavar="ROWS/PIECE",
                        help=f"span and piece rows (repeatable; default {blocked.SPAN_ROWS}/{blocked.PIECE_ROWS})")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=9, help="rounds per length (default 9)")
    parser.add_argument(
        "--backward", action="store_true", help="time forward + backward (q, k, v, the table)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    try:
        spans = [
            tuple(int(x) for x in s.split("/"))
            for s in args.spans or [f"{blocked.SPAN_ROWS}/{blocked.PIECE_ROWS}"]
        ]
    except ValueError:
        parser.error("--spans takes ROWS/PIECE, two whole numbers, e.g. 1024/256")
    if any(len(s) != 2 or min(s) < 1 for s in spans):
        parser.error("--spans takes ROWS/PIECE, two whole numbers >= 1, e.g. 1024/256")
    allocator = speed.steady_allocator()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU code "
          f"{torch.backends.cpu.get_cpu_capability()}, allocator {allocator['mode']}; {'forward+backward' if args.backward else 'forward'}, "
          f"(1, {HEADS}, L, {HEAD_DIM}) float32; medians (range), x = time / the floor's")  # fmt: skip
    for length in args.length or [1024, 2048, 4096]:
        g = torch.Generator().manual_seed(0)
        q, k, v = (
            torch.randn(1, HEADS, length, HEAD_DIM, generator=g).requires_grad_(args.backward)
            for _ in range(3)
        )
        for name in args.encoding or ["alibi", "t5"]:
            encoding = posenc.build_for_model(name, d_model=HEADS * HEAD_DIM, num_heads=HEADS)
            encoding.requires_grad_(args.backward)
            cases = contenders(q, k, v, encoding, spans, args.backward)
            check(cases)
            times = speed.interleaved_times(cases, args.rounds)
            floor = statistics.median(times["unbiased causal SDPA"])
            for label, ts in times.items():
                m = statistics.median(ts)
                print(f"L {length} {name:5s} {label:22s} {1e3 * m:8.2f} ms  {m / floor:.3f}x "
                      f"({min(ts) / floor:.3f}-{max(ts) / floor:.3f})", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
