"""Every build of the rotary kernel this CPU can run gives the plain path's bits.

``_rope.c`` has vector code for AVX-512 and for AVX2 and plain C loops for everything else;
``-march=native`` picks one, ``POSENC_KERNEL_ISA`` forces another (kernels/_build.py). Each
build is loaded here side by side (``_build.load("_rope", isa)``) and checked against the plain
PyTorch path to the last bit: float32, float64, bfloat16, float16; both layouts; head sizes whose
pairs fill whole vector steps and ones that leave a tail; partial rotary; strided inputs,
per-batch tables; forward and backward (the transpose); one call and two threads; every
bfloat16 bit pattern through the vector rounding. The AVX2 build must hold no AVX-512
instruction, so that timing it on an AVX-512 machine times what an AVX2 machine runs. A build that
fails degrades to the plain path with one line; a damaged cached library is rebuilt, never mapped; a
library is on disk (fsynced) before it is renamed into place.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest
import torch

from posenc.encoding.rotary.rope import apply_rotary
from posenc.kernels import _build
from posenc.kernels import fused_rope as rope
from posenc.kernels.fused_rope import apply_rotary_fused, rotate_trusted

LAYOUTS = ("half", "interleaved")


def _runnable(isa: str) -> bool:
    try:
        _build._check_runnable(isa)
    except RuntimeError:
        return False
    return True


RUNNABLE = [isa for isa in _build.ISAS if _runnable(isa)]
EXPECTED_ISA = {"avx2": {"avx2"}, "avx512": {"avx512"}, "baseline": {"scalar"},
                "native": {"avx512", "avx2", "scalar"}}  # fmt: skip
needs_kernel = pytest.mark.skipif(not rope.available(), reason="no C compiler: the plain path is used")


@pytest.fixture(params=RUNNABLE)
def isa(request, monkeypatch):
    """The rotary kernel's entry points switched to one build for the test."""
    name = request.param
    if _build.load("_rope", name) is None:
        pytest.skip(f"the {name} build of the kernel is unavailable (no C compiler?)")
    monkeypatch.setattr(rope, "load", lambda lib, isa=None: _build.load(lib, name))
    monkeypatch.setattr(rope, "_FN", {})
    return name


def randn(*shape, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def tables(shape, dtype, *, seed, scale=1.0):
    angles = randn(*shape, seed=seed, dtype=torch.float64) * 3
    wide = rope.table_dtype(dtype)
    return (angles.cos() * scale).to(wide), (angles.sin() * scale).to(wide)


def plain(x, cos, sin, layout, r):
    wide = rope.table_dtype(x.dtype)
    return apply_rotary(x.to(wide), cos, sin, layout=layout, rotary_dim=r).to(x.dtype)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal to the last bit (NaN where the other is NaN)."""
    assert a.dtype == b.dtype and a.shape == b.shape
    torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_each_build_says_which_vector_code_it_holds(isa):
    assert rope.isa() in EXPECTED_ISA[isa]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    "d,r",
    [(128, 128), (64, 64), (96, 64), (8, 8), (6, 6), (40, 34), (132, 130), (48, 32)],
    ids=lambda v: str(v),
)
def test_every_build_equals_the_plain_path_forward_and_backward(isa, dtype, layout, d, r):
    """r/2 = 64 and 32 run whole vector steps (8 or 16 pairs), 3, 17 and 65 leave a tail; the
    input is (b, n, h, d) viewed as (b, h, n, d), i.e. strided; the gradient is the transpose."""
    x = randn(2, 5, 3, d, seed=d + r, dtype=dtype).transpose(1, 2).requires_grad_()
    cos, sin = tables((1, 1, 5, r // 2), dtype, seed=r, scale=1.1)
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=r)
    slow = plain(x, cos, sin, layout, r)
    same_bits(fast, slow)
    g = randn(2, 3, 5, d, seed=3, dtype=dtype)
    same_bits(torch.autograd.grad(fast, x, g)[0], torch.autograd.grad(slow, x, g)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("threads", [1, 2])
def test_q_and_k_in_one_call_with_threads_and_per_batch_tables(isa, dtype, layout, threads):
    """rotate_trusted's single foreign call: q and k of different shapes (grouped-query keys),
    large enough for a thread team, tables per batch row; in place (out=x) as well."""
    q = randn(2, 8, 40, 128, seed=1, dtype=dtype)
    k = randn(2, 2, 40, 128, seed=2, dtype=dtype)
    cos, sin = tables((2, 1, 40, 64), dtype, seed=5, scale=0.9)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            outs = rotate_trusted(((q, cos, sin), (k, cos, sin)), layout=layout, rotary_dim=128)
            same_bits(outs[0], plain(q, cos, sin, layout, 128))
            same_bits(outs[1], plain(k, cos, sin, layout, 128))
            y = q.clone()
            c48, s48 = cos[..., :48].contiguous(), sin[..., :48].contiguous()
            apply_rotary_fused(y, c48, s48, layout=layout, rotary_dim=96, out=y)
            same_bits(y, plain(q, c48, s48, layout, 96))
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_bfloat16_bit_pattern_rounds_as_the_plain_path(isa, layout):
    """All 65536 bfloat16 values (NaN, infinities, subnormals included) as x1 and as x2, with
    factors that make ties (1.5, 0.75, 1 + 2^-8) and random ones: the vector code's widening and
    its round-to-nearest-even must give the bits torch's conversion gives."""
    bits = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16)
    values = bits.view(torch.bfloat16).reshape(1, 1, 512, 128)
    x = torch.cat((values, values.flip(-1)), dim=-1)  # each value as x1 and x2 of some pair
    ties = torch.tensor([1.5, 0.75, 1 + 2**-8, 1.0, 0.0, -1.5])
    factors = torch.cat((ties, randn(128 - ties.numel(), seed=11, dtype=torch.float32)))
    cos = factors.roll(7).expand(512, 128).reshape(1, 1, 512, 128).contiguous()
    sin = factors.expand(512, 128).reshape(1, 1, 512, 128).contiguous()
    with torch.no_grad():
        fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=256)
    same_bits(fast, plain(x, cos, sin, layout, 256))


def _evex_or_zmm(disassembly: str) -> list[str]:
    """Lines of ``objdump -d`` output with an AVX-512 instruction: a zmm or mask register, or
    an EVEX prefix (0x62 first, after legacy prefixes: in 64-bit mode 0x62 is always EVEX)."""
    found = []
    prefixes = {"66", "67", "f2", "f3", "2e", "36", "3e", "26", "64", "65", "f0"}
    for line in disassembly.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue  # a label, or the continuation of a long instruction's bytes
        raw = [b for b in parts[1].split() if b not in prefixes]
        if (raw and raw[0] == "62") or re.search(r"%zmm|%k[0-7]\b", parts[2]):
            found.append(line.strip())
    return found


@pytest.mark.skipif(shutil.which("objdump") is None, reason="no objdump")
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 only")
def test_the_forced_avx2_build_holds_no_avx512_instruction():
    if "avx2" not in RUNNABLE or _build.load("_rope", "avx2") is None:
        pytest.skip("no AVX2 build on this machine")
    cc = _build._compiler()
    assert cc is not None
    path = _build._library_path("_rope", cc, "avx2")
    out = subprocess.run(["objdump", "-d", str(path)], capture_output=True, text=True, timeout=120).stdout
    assert "vmulps" in out and "%ymm" in out  # the AVX2 vector code is there
    assert _evex_or_zmm(out) == []
    if "avx512" in RUNNABLE and _build.load("_rope", "avx512") is not None:  # the check can fail
        other = _build._library_path("_rope", cc, "avx512")
        dis = subprocess.run(["objdump", "-d", str(other)], capture_output=True, text=True, timeout=120)
        assert _evex_or_zmm(dis.stdout)


def test_the_environment_picks_the_build(monkeypatch, caplog):
    monkeypatch.setattr(_build, "_warned", set())
    monkeypatch.setenv(_build.ISA_ENV, "baseline")
    assert _build.requested_isa() == "baseline"
    lib = _build.load("_rope")
    assert lib is None or lib is _build.load("_rope", "baseline")
    monkeypatch.setenv(_build.ISA_ENV, " AVX2 ")
    assert _build.requested_isa() == "avx2"
    monkeypatch.setenv(_build.ISA_ENV, "sse9")
    with caplog.at_level(logging.WARNING, logger="posenc"):
        assert _build.load("_rope") is None
    message = caplog.text
    assert _build.ISA_ENV in message and "native, avx512, avx2, baseline" in message and "'sse9'" in message


def test_a_forced_build_this_cpu_cannot_run_is_refused(monkeypatch, caplog):
    """Its code would die with SIGILL: refused by name, the plain path runs, one log line."""
    monkeypatch.setattr(_build, "_warned", set())
    monkeypatch.setattr(_build, "_loaded", {})
    monkeypatch.setattr(_build, "_cpu_flags", lambda: "flags : fpu sse sse2 avx fma f16c")
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    with caplog.at_level(logging.WARNING, logger="posenc"):
        assert _build.load("_rope", "avx2") is None
        assert _build.load("_rope", "avx2") is None
    lines = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(lines) == 1 and "lacks avx2" in lines[0], lines
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    assert _build.load("_rope", "avx512") is None
    assert "needs an x86-64 CPU" in caplog.text


# ---------------------------------------------------------------------------
# Building and caching the library.
# ---------------------------------------------------------------------------


def test_failed_build_degrades_to_none_with_one_line(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setattr(_build, "_loaded", {})
    monkeypatch.setattr(_build, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="posenc"):
        assert _build.load("_rope") is None
        assert _build.load("_rope") is None
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
    monkeypatch.setattr(_build, "_loaded", {})
    monkeypatch.setenv("POSENC_DISABLE_KERNELS", "1")
    assert _build.load("_rope") is None


USE_KERNEL = """
import torch
from posenc.kernels import _build
from posenc.kernels.fused_rope import apply_rotary_fused
from posenc.encoding.rotary.rope import apply_rotary

assert _build.load("_rope") is not None, "no kernel"
g = torch.Generator().manual_seed(0)
x = torch.randn(2, 3, 5, 8, generator=g)
angles = torch.randn(5, 4, generator=g)
cos, sin = angles.cos(), angles.sin()
torch.testing.assert_close(apply_rotary_fused(x, cos, sin, layout="half", rotary_dim=8), apply_rotary(x, cos, sin, layout="half", rotary_dim=8))
print("ok")
"""


@needs_kernel
@pytest.mark.parametrize("damage", ["truncate", "zero_stamp", "remove_stamp"])
def test_a_damaged_cached_library_is_rebuilt_never_mapped(tmp_path, damage):
    """Found: a truncated cached ``.so`` killed the process with SIGBUS (no message) on load.

    A fresh process builds the library into an empty cache; then the file is damaged as a
    crash before its bytes reached the disk would leave it; the next process must rebuild it
    (and give the same numbers as the plain path), not die.
    """
    env = {**os.environ, "POSENC_CACHE_DIR": str(tmp_path)}
    env.pop("POSENC_DISABLE_KERNELS", None)
    first = subprocess.run(
        [sys.executable, "-c", USE_KERNEL], capture_output=True, text=True, env=env, timeout=300
    )
    assert first.returncode == 0, first.stderr
    (library,) = (tmp_path / "kernels").glob("_rope-*.so")
    size = library.stat().st_size
    stamp = library.with_name(library.name + ".sha256")
    if damage == "truncate":
        with open(library, "r+b") as handle:
            handle.truncate(size // 3)
    elif damage == "zero_stamp":  # right size, wrong bytes
        library.write_bytes(bytes(size))
    else:  # a library from before stamps existed, or a stamp lost: rebuilt rather than trusted
        stamp.unlink(missing_ok=True)
    second = subprocess.run(
        [sys.executable, "-c", USE_KERNEL], capture_output=True, text=True, env=env, timeout=300
    )
    assert second.returncode == 0, (second.returncode, second.stderr)  # was -7 (SIGBUS) for a truncated file
    assert second.stdout.strip() == "ok"
    assert library.stat().st_size == size and _build.verified(library)


@needs_kernel
def test_the_library_is_fsynced_before_it_is_renamed(monkeypatch, tmp_path):
    """Found: the compile step renamed the new library into place without fsync, so a crash
    could leave a name pointing at a file whose bytes never reached the disk."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(
            ("fsync", os.readlink(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else str(fd))
        )
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    target = tmp_path / "lib.so"
    _build._compile("_rope", _build._compiler(), target)
    renamed = [i for i, (kind, path) in enumerate(events) if kind == "replace" and path == str(target)]
    assert renamed, events
    synced_before = [kind for kind, _ in events[: renamed[0]]]
    assert "fsync" in synced_before, events
    assert _build.verified(target)


STREAM_BYTES = 24 << 20  # _rope.c: calls that read and write more than this may stream their stores


def _past_streaming_size(dtype):
    """(1, 8, n, 128) ``x`` that alone reads and writes more than STREAM_BYTES, and its tables."""
    n = (STREAM_BYTES // (2 * 8 * 128 * dtype.itemsize)) + 16
    cos, sin = tables((1, 1, n, 64), dtype, seed=8)
    return randn(1, 8, n, 128, seed=7, dtype=dtype), cos, sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_calls_past_the_streaming_size_stream_and_give_the_same_bits(isa, dtype, layout):
    """Past STREAM_BYTES the vector builds write with non-temporal stores (the AVX2 build's
    16-byte half-precision stores do not: measured slower); forward and backward give the plain
    path's bits."""
    x, cos, sin = _past_streaming_size(dtype)
    x.requires_grad_()
    before = rope.streamed_calls()
    fast = apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=128)
    vector = rope.isa() == "avx512" or (rope.isa() == "avx2" and dtype == torch.float32)
    assert rope.streamed_calls() - before == int(vector)
    slow = plain(x, cos, sin, layout, 128)
    same_bits(fast, slow)
    g = randn(*x.shape, seed=9, dtype=dtype)
    same_bits(torch.autograd.grad(fast, x, g)[0], torch.autograd.grad(slow, x, g)[0])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_calls_past_the_streaming_size_that_cannot_stream_take_plain_stores(isa, layout):
    """Non-temporal stores need aligned addresses: an output that starts off a 64-byte boundary, rows
    whose length is not a multiple of 64 bytes, or (half layout) half rows that are not (rotary_dim
    72 in float32) take plain stores (a misaligned non-temporal store would kill the process), with
    the plain path's bits; an output on a boundary streams, in place too."""
    x, cos, sin = _past_streaming_size(torch.float32)
    slow = plain(x, cos, sin, layout, 128)
    storage = torch.empty(x.numel() + 64)
    vector = rope.isa() != "scalar"
    for offset, streams in ((1, False), (8, False), (48, True)):  # 4, 32 and 192 bytes off a boundary
        out = storage[offset : offset + x.numel()].view(x.shape)
        streams = streams and out.data_ptr() % 64 == 0 and vector
        before = rope.streamed_calls()
        apply_rotary_fused(x, cos, sin, layout=layout, rotary_dim=128, out=out)
        assert rope.streamed_calls() - before == int(streams), offset
        same_bits(out, slow)
    y = x.clone()
    before = rope.streamed_calls()
    apply_rotary_fused(y, cos, sin, layout=layout, rotary_dim=128, out=y)
    assert rope.streamed_calls() - before == int(vector)
    same_bits(y, slow)
    before = rope.streamed_calls()
    wide = randn(1, 8, x.shape[2], 100, seed=10, dtype=torch.float32)  # rows of 400 bytes
    c50, s50 = cos[..., :50].contiguous(), sin[..., :50].contiguous()
    same_bits(
        apply_rotary_fused(wide, c50, s50, layout=layout, rotary_dim=100), plain(wide, c50, s50, layout, 100)
    )
    c36, s36 = cos[..., :36].contiguous(), sin[..., :36].contiguous()
    same_bits(apply_rotary_fused(x, c36, s36, layout=layout, rotary_dim=72), plain(x, c36, s36, layout, 72))
    assert rope.streamed_calls() - before == (1 if layout == "interleaved" and vector else 0)
