"""Instructions per element of the rotary kernel (``_rope.c``), counted by valgrind's callgrind.

A count, unlike a time, does not move with the load on a shared machine, so it is how a change to
the kernel is judged there; the speed races (``run_speed.py``) judge it on an idle one. Each case
is one call of the kernel on q and k, as ``RoPE.rotate`` makes it (``rotate_rows``: tables
broadcast over heads, whole head rotated), with the shapes of the speed race's rope section and a
one-token decode step; ``sign=-1`` is the transpose a backward pass runs.

valgrind runs no AVX-512 instruction, so the builds counted are ``avx2`` (what an AVX2 machine
runs, forced as ``POSENC_KERNEL_ISA=avx2`` does) and ``baseline``; ``--source FILE.c`` counts
another version of the kernel with the same flags (e.g. ``git show REV:src/posenc/kernels/_rope.c``).

Usage: python benchmarks/kernel_counts.py [--isa avx2|baseline] [--source FILE.c]
Needs: valgrind and gcc.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from posenc.kernels import _build

# (dtype, b, h, n, d, interleaved, sign)
CASES = [
    ("f32", 1, 8, 1024, 64, 0, 1),
    ("f32", 1, 32, 2048, 128, 0, 1),
    ("f32", 4, 32, 512, 128, 0, 1),
    ("bf16", 1, 32, 2048, 128, 0, 1),
    ("f32", 1, 32, 2048, 128, 0, -1),
    ("f32", 1, 32, 2048, 128, 1, 1),
    ("f32", 1, 32, 1, 128, 0, 1),
]

DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
enum { JOB_WORDS = 22 };
typedef void (*fn_t)(const int64_t *, int);
int main(int argc, char **argv) { /* lib dtype b h n d interleaved sign */
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    int es = strcmp(argv[2], "f32") == 0 ? 4 : 2;
    int64_t b = atol(argv[3]), h = atol(argv[4]), n = atol(argv[5]), d = atol(argv[6]);
    char name[64];
    snprintf(name, sizeof name, "posenc_rope_%s", argv[2]);
    fn_t fn = (fn_t)dlsym(lib, name);
    int64_t numel = b * h * n * d, jobs[2 * JOB_WORDS];
    float *c = calloc(n * d / 2 + 16, 4), *s = calloc(n * d / 2 + 16, 4);
    for (int t = 0; t < 2; ++t) {
        char *x = calloc(numel * es + 64, 1), *o = calloc(numel * es + 64, 1);
        int64_t w[JOB_WORDS] = {(intptr_t)x, (intptr_t)o, (intptr_t)c, (intptr_t)s, b, h, n, d, d,
            atol(argv[7]), atol(argv[8]), h * n * d, n * d, d, h * n * d, n * d, d, 0, 0, d / 2, 0, 1};
        memcpy(jobs + t * JOB_WORDS, w, sizeof w);
    }
    fn(jobs, 2);
    return 0;
}
"""


def build_source(cc: str, source: Path, isa: str, library: Path) -> Path:
    """Another version of ``_rope.c`` built as posenc builds its own for ``isa``: ``library``."""
    subprocess.run([cc, *_build.isa_flags(isa), "-o", str(library), str(source)], check=True)
    return library


def count(driver: Path, library: Path, case: tuple, work: Path) -> int:
    """Instructions executed inside ``posenc_rope_*`` for one call on q and k."""
    out = work / "callgrind.out"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--toggle-collect=posenc_rope_*",
           str(driver), str(library), *map(str, case)]  # fmt: skip
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    for line in result.stderr.splitlines():
        if "Collected :" in line:
            return int(line.split(":")[1])
    raise RuntimeError(f"callgrind gave no count: {result.stderr[-500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", choices=["avx2", "baseline"], default="avx2")
    parser.add_argument("--source", type=Path, default=None, help="another _rope.c to count (same flags)")
    args = parser.parse_args(argv)
    cc = _build._compiler()
    if shutil.which("valgrind") is None or cc is None:
        parser.error("needs valgrind and a C compiler")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "driver.c").write_text(DRIVER)
        subprocess.run([cc, "-O2", "-o", str(work / "driver"), str(work / "driver.c"), "-ldl"], check=True)
        if args.source is not None:
            library = build_source(cc, args.source, args.isa, work / "rope.so")
        else:
            if _build.load("_rope", args.isa) is None:
                parser.error(f"the {args.isa} build of the kernel is unavailable on this machine")
            library = _build._library_path("_rope", cc, args.isa)
        print(
            f"{args.isa} build of {args.source or 'posenc/kernels/_rope.c'}: instructions per element (q and k)"
        )
        for case in CASES:
            dtype, b, h, n, d, interleaved, sign = case
            total = count(work / "driver", library, case, work)
            layout = "interleaved" if interleaved else "half"
            print(f"  {dtype:4} ({b},{h},{n},{d}) {layout:11} sign {sign:+d}: {total / (2 * b * h * n * d):.3f}"
                  f"  ({total} instructions)", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
