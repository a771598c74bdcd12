"""Fuzz the public surface: ``posenc.build``, every hook, every RoPE scaling, the CLI.

Contract checked on every random call (docs/guarantees.md):

* it returns a correct-looking result (right shape and dtype, finite for finite input), or
* it raises ValueError/TypeError whose message names the offending parameter;
* never IndexError/RuntimeError/AttributeError from inside torch, never a hang;
* every CLI misuse exits 2 with exactly one line on stderr and no traceback.

Everything is registry-driven (``posenc.ENCODINGS``, ``ROPE_SCALINGS``, the click
commands' own options), so a new encoding, scaling or option is fuzzed at once.
Candidate values come from each Config's fields and defaults.

Documented exception (not a failure): a size so large that the table cannot be
allocated (``2**40`` rows) fails with torch's allocation error or MemoryError.
The test only uses such "huge" sizes, never merely large ones (which would
really allocate gigabytes on a shared machine).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import typing
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.faults import FAULTS, fault_path

import posenc
import posenc.testing
from posenc.cli import main as cli_main
from posenc.encoding.rotary import scaling as rope_scaling

NAMES = list(posenc.ENCODINGS)
MEMORY_HEADROOM = 8 << 30  # bytes of address space the fuzz may add (a runaway fails, not the box)


@pytest.fixture(autouse=True, scope="module")
def _bounded_memory():
    """Cap address space while fuzzing: a runaway allocation raises MemoryError instead of
    pushing a shared machine into the OOM killer (found the hard way: ALiBi with 2**40 heads)."""
    try:
        import resource

        with open("/proc/self/status") as status:
            size = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        limit = size + MEMORY_HEADROOM
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (ImportError, OSError, StopIteration, ValueError):  # not Linux: run unbounded
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


MODEL_DIMS = {"dim": 16, "head_dim": 8, "num_heads": 2}  # what build_for_model fills
HUGE = 2**40  # no table of this many rows can be allocated: fails fast, never swaps

INTS = [0, -1, -(2**31), 1, 2, 3, 7, 64, HUGE]
FLOATS = [math.nan, math.inf, -math.inf, -1.0, -0.0, 0.0, 1e-300, 0.5, 1.0, 3.0, 1e300]
WRONG_TYPES = [
    "8",
    "",
    [],
    {},
    None,
    True,
    False,
    1.5,
    b"x",
    object(),
    torch.tensor(2.0),
    torch.tensor([1, 2]),
]
SCALING_DICTS = [
    None,
    {},
    {"rope_type": "linear", "factor": 2.0},
    {"rope_type": "nope"},
    {"rope_type": "yarn", "factor": 4.0},
    "linear",
]


def _allocation_failure(exc: BaseException, mutated: dict) -> bool:
    """The documented exception: a huge size whose table cannot be allocated."""
    huge = any(isinstance(v, int) and not isinstance(v, bool) and abs(v) >= HUGE for v in mutated.values())
    text = str(exc)
    return huge and (
        isinstance(exc, MemoryError)
        or (isinstance(exc, RuntimeError) and ("allocate" in text or "Storage size" in text))
    )


def _assert_names(exc: BaseException, words: list[str]) -> None:
    assert isinstance(exc, (ValueError, TypeError)), f"{type(exc).__name__}: {exc}"
    text = str(exc)
    assert any(re.search(rf"(?<![A-Za-z_]){re.escape(w)}(?![A-Za-z_])", text) for w in words), (
        f"error does not name any of {words}: {type(exc).__name__}: {text}"
    )


# ---------------------------------------------------------------------------
# 1. posenc.build with random configs.
# ---------------------------------------------------------------------------


def _base_config(cls) -> dict:
    fields = cls.Config.field_names()
    return {k: v for k, v in MODEL_DIMS.items() if k in fields}


def _candidates(field: dataclasses.Field) -> list:
    default = field.default if field.default is not dataclasses.MISSING else MODEL_DIMS.get(field.name)
    values = INTS + FLOATS + WRONG_TYPES
    if isinstance(default, str) or "str" in str(field.type):
        values = values + [
            default,
            "half",
            "concat",
            "sinusoidal",
            "zzz",
            default.upper() if default else "X",
        ]
    if "dict" in str(field.type):
        values = values + SCALING_DICTS
    return values + [default]


@st.composite
def mutated_configs(draw, cls):
    config = _base_config(cls)
    fields = dataclasses.fields(cls.Config)
    mutated = {}
    if fields:
        for field in draw(
            st.lists(st.sampled_from(fields), min_size=1, max_size=2, unique_by=lambda f: f.name)
        ):
            mutated[field.name] = draw(st.sampled_from(_candidates(field)))
    if draw(st.booleans()) and draw(st.booleans()):
        mutated[draw(st.sampled_from(["dims", "bse", "zzz_unknown", "rope_type"]))] = 1
    config.update(mutated)
    return config, mutated


def _hook_smoke(enc) -> None:
    """Run the kind's hook once on small finite input; the output must be finite."""
    out = _call_hook(enc, batch=2, seq=5, dtype=torch.float32, positions=None, dim_offset=0)
    for t in out:
        assert not torch.isnan(t).any(), f"{enc!r} NaN output"
        if enc.kind != "contextual":
            assert torch.isfinite(t).all(), f"{enc!r} inf output for finite input"


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
@settings(max_examples=60)
def test_build_random_configs(name, data):
    cls = posenc.ENCODINGS[name]
    config, mutated = data.draw(mutated_configs(cls))
    try:
        enc = posenc.build(name, **config)
        _hook_smoke(enc)
    except Exception as exc:  # noqa: BLE001 - the contract is about which exceptions
        if _allocation_failure(exc, mutated):
            return
        _assert_names(exc, list(mutated) or ["config"])


def test_build_rejects_wrong_names_and_required_keys():
    for bad in ("ropee", "", "ROPE"):
        with pytest.raises(ValueError, match="unknown encoding"):
            posenc.build(bad)
    with pytest.raises(TypeError, match="encoding name"):
        posenc.build(3)
    for name, cls in posenc.ENCODINGS.items():
        required = [k for k, v in cls.Config.parameters().items() if v == "<required>"]
        if required:
            with pytest.raises(ValueError, match=re.escape(repr(required[0])[1:-1])):
                posenc.build(name)


# ---------------------------------------------------------------------------
# 2. Every RoPE scaling with random parameters.
# ---------------------------------------------------------------------------

GOOD_SCALING = {
    "factor": 4.0,
    "original_max_position_embeddings": 16,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "short_factor": [1.0] * 4,
    "long_factor": [2.0] * 4,
}
SCALING_VALUES = [0, -1, 1, 2, 4, 8.0, 0.5, math.nan, math.inf, -math.inf, 1e300, HUGE, "x", None, True,
                  [], [1.0] * 4, [0.0] * 4, [1.0] * 3, [math.nan] * 4, {}]  # fmt: skip


@st.composite
def scalings(draw):
    name = draw(st.sampled_from(list(rope_scaling.ROPE_SCALINGS)))
    required, optional = rope_scaling.ROPE_SCALING_KEYS[name]
    params = {"rope_type": name, **{k: GOOD_SCALING[k] for k in required}}
    keys = list(required) + list(optional) + ["bogus_key"]
    mutated = {}
    for key in draw(st.lists(st.sampled_from(keys), max_size=2, unique=True)):
        mutated[key] = params[key] = draw(st.sampled_from(SCALING_VALUES))
    if draw(st.booleans()):
        params.pop(draw(st.sampled_from(["rope_type", *required])) if required else "rope_type", None)
    max_pos = draw(st.sampled_from([None, None, 32, 0, -5, 1.5]))
    return params, mutated, max_pos


@given(case=scalings(), top=st.sampled_from([0, 15, 100, 65_535, 70_000]))
@settings(max_examples=150)
def test_rope_scalings_random_parameters(case, top):
    params, mutated, max_pos = case
    try:
        enc = posenc.build("rope", head_dim=8, scaling=params, max_position_embeddings=max_pos)
    except Exception as exc:  # noqa: BLE001
        words = [*mutated, "rope_type", "rope scaling", "scaling", "max_position_embeddings"]
        _assert_names(exc, words)
        return
    q = torch.randn(1, 2, 3, 8, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(top, top + 3)[None]
    q_rot, k_rot = enc.rotate(q, q, q_positions=positions, k_positions=positions)
    assert torch.isfinite(q_rot).all() and torch.isfinite(k_rot).all(), params
    # the scaling swaps in place and the public compute() agrees with the module
    inv_freq, attention_scaling = enc.frequencies(top)
    assert torch.isfinite(inv_freq).all() and (inv_freq > 0).all() and math.isfinite(attention_scaling)


# ---------------------------------------------------------------------------
# 3. Every hook with random shapes, dtypes and positions.
# ---------------------------------------------------------------------------

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]


def _model_dim(enc) -> int:
    if enc.kind == "additive":
        return enc.config.dim
    return getattr(enc.config, "head_dim", 8)


def _call_hook(enc, *, batch, seq, dtype, positions, dim_offset):
    """The kind's hook on random input; returns the output tensors."""
    g = torch.Generator().manual_seed(0)
    d = _model_dim(enc) + dim_offset
    if enc.kind == "additive":
        x = torch.randn(batch, seq, d, generator=g, dtype=torch.float64).to(dtype)
        return [enc.embed(x, positions=positions)]
    if enc.kind == "bias":
        return [enc.bias(seq, seq, q_positions=positions, k_positions=positions)]
    if enc.kind == "none":
        return []
    heads = getattr(enc.config, "num_heads", 2)
    q = torch.randn(batch, heads, seq, d, generator=g, dtype=torch.float64).to(dtype)
    k = torch.randn(batch, heads, seq, d, generator=g, dtype=torch.float64).to(dtype)
    if enc.kind == "rotary":
        return list(enc.rotate(q, k, q_positions=positions, k_positions=positions))
    if enc.kind == "relative":
        s = enc.scores(q, k, q_positions=positions, k_positions=positions)
        if not enc.has_values:
            return [s]
        probs = torch.softmax(s.float(), dim=-1).to(s.dtype)
        return [s, enc.values(probs, q_positions=positions, k_positions=positions)]
    logits = (q @ k.transpose(-1, -2)) / d**0.5
    causal = torch.ones(seq, seq, dtype=torch.bool).tril()
    return [enc.scores(q, k, logits.masked_fill(~causal, float("-inf")))]


def _positions(kind: str, batch: int, seq: int, offset: int):
    """A positions argument of the given ``kind`` (valid or not) and whether it is valid."""
    base = torch.arange(seq)[None] + offset
    cases = {
        "none": (None, True),
        "offset": (base, offset + seq - 1 <= 2**53 or seq == 0),  # float64 integers end at 2**53
        "int32": (base.to(torch.int32), True),  # offsets >= 2**31 wrap to other (valid) positions
        "1d": (base[0], offset + seq - 1 <= 2**53 or seq == 0),
        "rows": (
            base.expand(max(batch, 1), seq) + torch.arange(max(batch, 1))[:, None],
            offset + seq + 1 <= 2**53 or seq == 0,
        ),
        "negative": (torch.arange(seq)[None] - 1, seq == 0),
        "float": (base.float(), False),
        "bool": (torch.ones(1, seq, dtype=torch.bool), False),
        "long_by_one": (torch.arange(seq + 1)[None], False),
        "3d": (base[None], False),
        "list": (list(range(seq)), False),
    }
    return cases[kind]


@pytest.mark.parametrize("name", NAMES)
@given(
    batch=st.integers(0, 3),
    seq=st.integers(0, 6),
    dtype=st.sampled_from(DTYPES),
    dim_offset=st.sampled_from([0, 0, 0, 1, -2, 2]),
    positions_kind=st.sampled_from(
        ["none", "offset", "int32", "1d", "rows", "negative", "float", "bool", "long_by_one", "3d", "list"]
    ),
    offset=st.sampled_from([0, 1, 1000, 65_530, 1_000_000, HUGE, 2**53 - 3, 2**60]),
)
def test_hooks_random_inputs(name, batch, seq, dtype, dim_offset, positions_kind, offset):
    torch.manual_seed(0)
    enc = posenc.build_for_model(name, d_model=MODEL_DIMS["dim"], num_heads=MODEL_DIMS["num_heads"])
    positions, valid_positions = _positions(positions_kind, batch, seq, offset)
    try:
        outputs = _call_hook(
            enc, batch=batch, seq=seq, dtype=dtype, positions=positions, dim_offset=dim_offset
        )
    except Exception as exc:  # noqa: BLE001
        words = ["positions", "position", "q_positions", "k_positions", "x", "q", "k", "dim", "head_dim"]
        _assert_names(exc, words)
        if not valid_positions:
            return
        if dtype == torch.int64 and enc.kind != "bias":
            _assert_names(exc, ["x", "q", "k", "positions", "q_positions", "k_positions"])
        return
    if enc.kind == "none":
        return
    takes_positions = enc.kind != "contextual"  # CoPE computes positions from content
    assert valid_positions or not takes_positions, f"accepted invalid positions ({positions_kind})"
    if enc.kind != "bias":  # bias hooks take no feature tensor
        assert dtype.is_floating_point, "accepted an integer input tensor"
        assert dim_offset == 0 or enc.kind == "contextual", "accepted the wrong feature size"
    for out in outputs:
        assert not torch.isnan(out).any(), "NaN output for finite input"
        if enc.kind != "contextual":  # CoPE returns -inf where the input logits were masked
            assert torch.isfinite(out).all(), "inf output for finite input"
    if enc.kind in ("additive", "rotary"):
        assert all(out.dtype == dtype for out in outputs), [out.dtype for out in outputs]


# ---------------------------------------------------------------------------
# 3b. The model (attention dispatch) with random tokens, positions and padding masks.
# ---------------------------------------------------------------------------

VOCAB = 11


def _model(name: str):
    from posenc.nn.transformer import Transformer, TransformerConfig

    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=VOCAB, d_model=16, num_heads=2, num_layers=1, ffn_dim=16, encoding=name
    )
    return Transformer(config).eval()


@pytest.mark.parametrize("name", NAMES)
@given(
    batch=st.integers(1, 3),
    seq=st.integers(0, 5),
    positions_kind=st.sampled_from(["none", "offset", "rows", "negative", "float", "long_by_one", "3d"]),
    offset=st.sampled_from([0, 7, 100_000]),
    mask_kind=st.sampled_from(["none", "all", "left_pad", "float", "wrong_batch", "empty_row"]),
    bad_tokens=st.sampled_from([None, None, "float", "out_of_range", "negative", "1d"]),
)
@settings(max_examples=25)
def test_model_forward_random_inputs(name, batch, seq, positions_kind, offset, mask_kind, bad_tokens):
    model = _model(name)
    tokens = torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(1))
    tokens = {
        None: tokens,
        "float": tokens.float(),
        "out_of_range": tokens + VOCAB,
        "negative": tokens - VOCAB,
        "1d": tokens[0],
    }[bad_tokens]
    positions, valid = _positions(positions_kind, batch, seq, offset)
    mask = {
        "none": None,
        "all": torch.ones(batch, seq, dtype=torch.bool),
        "left_pad": torch.arange(seq)[None].expand(batch, seq) >= torch.arange(batch)[:, None],
        "float": torch.ones(batch, seq),
        "wrong_batch": torch.ones(batch + 1, seq, dtype=torch.bool),
        "empty_row": torch.zeros(batch, seq, dtype=torch.bool),
    }[mask_kind]
    other_valid = mask_kind not in ("float", "wrong_batch") and (
        bad_tokens is None or (seq == 0 and bad_tokens in ("out_of_range", "negative"))
    )
    try:
        with torch.no_grad():
            logits = model(tokens, positions=positions, padding_mask=mask)
    except Exception as exc:  # noqa: BLE001
        _assert_names(exc, ["tokens", "positions", "padding_mask", "mask", "position", "max_len"])
        return
    assert other_valid, f"accepted invalid input (mask {mask_kind}, tokens {bad_tokens})"
    takes_positions = posenc.ENCODINGS[name].kind not in ("none", "contextual")
    assert valid or not takes_positions, f"accepted invalid positions ({positions_kind})"
    assert logits.shape == (batch, seq, VOCAB)
    assert torch.isfinite(logits).all(), "non-finite logits for finite input"


# ---------------------------------------------------------------------------
# 4. The CLI with random argument lists built from the real commands' options.
# ---------------------------------------------------------------------------


class _Reached(BaseException):
    """A valid command reached a slow backend (benchmark, report, figure); not run here."""


def _commands(group: click.Group = cli_main, prefix=()) -> dict[tuple[str, ...], click.Command]:
    out = {}
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            out.update(_commands(command, prefix + (name,)))
        else:
            out[prefix + (name,)] = command
    return out


COMMANDS = _commands()
JUNK = ["-1", "0", "1", "3", "x", "", "1.5", "nan", "inf", "-inf", "1e400", "zzz", "--", "a=b", "factor=[1"]


def _values_for(param: click.Parameter) -> list[str]:
    values = list(JUNK)
    if isinstance(param.type, click.Choice):
        values += list(param.type.choices)
    if isinstance(param.type, click.types.IntParamType):
        values += ["2", "4", "8", "16", str(2**70)]
    if isinstance(param.type, click.types.FloatParamType):
        values += ["2.0", "4", "1e308"]
    if isinstance(param.type, click.Path):
        values += ["/nonexistent/dir/out.png", "{tmp}/out.png", "{tmp}/out.xyz", "{tmp}", "/dev/zero"]
        values += ["{tmp}/" + "n" * 300, "{tmp}/out.png/x.png", "/sys/posenc/out"]  # too long; under a file
    if param.name in ("name", "encodings", "encoding"):
        values += NAMES[:4] + ["rope", "ropee", "alibi,zzz"]
    if param.name in ("profile",):
        values += ["smoke", "quick"]
    if param.name in ("params",):
        values += ["factor=2", "beta_fast=x", "original_max_position_embeddings=16"]
    return values


@st.composite
def cli_arguments(draw):
    path = draw(st.sampled_from(sorted(COMMANDS)))
    command = COMMANDS[path]
    args = list(path)
    params = [p for p in command.params if p.name not in ("help",)]
    for param in draw(st.lists(st.sampled_from(params), max_size=4)) if params else []:
        if isinstance(param, click.Argument):
            args.append(draw(st.sampled_from(_values_for(param))))
        elif param.is_flag:
            args.append(param.opts[0])
        else:
            args += [draw(st.sampled_from(param.opts)), draw(st.sampled_from(_values_for(param)))]
    if draw(st.integers(0, 5)) == 0:
        args.insert(draw(st.integers(0, len(args))), draw(st.sampled_from(["--bogus", "extra", "-Z"])))
    return args


SLOW_BACKENDS = (  # (module, function): what a valid call of a slow command ends in
    ("posenc.compare", "_execute"),  # compare's runs, after its checks (the device, threads, the grid)
    ("posenc.report", "build_report"),
    ("posenc.viz", "render"),
    ("posenc.conform", "export"),
    ("posenc.conform", "check"),
    ("posenc.extend", "run"),
)


def _stub_slow_backends(mp: pytest.MonkeyPatch) -> None:
    """Stop valid calls at the slow backends (benchmarks, report, figures); validation still runs."""
    import importlib

    def reached(*args, **kwargs):
        raise _Reached

    for module, function in SLOW_BACKENDS:
        try:
            mp.setattr(importlib.import_module(module), function, reached)
        except (ImportError, AttributeError):  # a backend not written yet
            continue


@given(args=cli_arguments())
@settings(max_examples=300)
def test_cli_random_arguments(args, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    args = [a.replace("{tmp}", str(tmp)) for a in args]
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(tmp)  # relative output paths land in tmp, not in the checkout
            _stub_slow_backends(mp)
            result = CliRunner().invoke(cli_main, args, catch_exceptions=True)
    except _Reached:
        return  # a valid call got as far as the slow backend
    stderr = result.stderr
    assert "Traceback" not in stderr and "Traceback" not in result.stdout, (args, stderr)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: {type(result.exception).__name__}: {result.exception}")
    assert result.exit_code in (0, 2), (args, result.exit_code, stderr)
    if result.exit_code == 2:
        lines = [line for line in stderr.splitlines() if line.strip()]
        assert len(lines) == 1, (args, stderr)
        assert lines[0].startswith(("posenc: error:", "Error:", "posenc")), (args, stderr)


# ---------------------------------------------------------------------------
# 4b. Every path option of every command with filesystem faults.
# ---------------------------------------------------------------------------
#
# Every option whose type is click.Path is found from the commands themselves; its role
# comes from the type: ``writable=True`` marks paths the command writes, ``file_okay=False``
# directories. Each role gets the faults that apply to it (a missing output directory is
# simply created; a huge file only matters to a reader). Every fault must give exit
# status 2 and one line ``posenc: error: ...`` naming the path, before any slow work.

# Arguments a command needs besides the path under test (its required ones, valid).
REQUIRED_ARGS = {
    ("plot",): ["rope", "--kind", "heatmap", "-o", "{tmp}/ok.png"],
    ("report",): ["-o", "{tmp}/ok-report"],
    ("conform", "export"): ["{tmp}/ok-vectors"],  # the output directory, when --hf-config is faulted
}


def _path_options() -> list[tuple[tuple[str, ...], click.Parameter]]:
    return [
        (path, param)
        for path, command in sorted(COMMANDS.items())
        for param in command.params
        if isinstance(param.type, click.Path)
    ]


PATH_OPTIONS = _path_options()


def _role(param: click.Parameter) -> str:
    kind = "directory" if not param.type.file_okay else "file"
    return f"{'write' if param.type.writable else 'read'} {kind}"


def test_path_options_are_all_classified():
    """Every command that takes a path is in the fault suite, with a role it can be faulted in."""
    found = {(" ".join(path), param.opts[0]): _role(param) for path, param in PATH_OPTIONS}
    assert found == {
        ("compare", "--config"): "read file",
        ("compare", "-o"): "write directory",
        ("conform check", "directory"): "read directory",
        ("conform export", "directory"): "write directory",
        ("conform export", "--hf-config"): "read file",
        ("extend", "--config"): "read file",
        ("extend", "-o"): "write directory",
        ("plot", "--curves"): "read directory",
        ("plot", "-o"): "write file",
        ("report", "-o"): "write directory",
        ("report", "--results"): "read directory",
        ("rope inspect", "--hf-config"): "read file",
        ("rope inspect", "--plot"): "write file",
    }, "a new path option: check it gets its faults (and update this list)"
    for path, command in COMMANDS.items():
        required = [p for p in command.params if p.required and not isinstance(p.type, click.Path)]
        if any(isinstance(p.type, click.Path) for p in command.params) and required:
            assert path in REQUIRED_ARGS, f"{path}: give REQUIRED_ARGS for {[p.name for p in required]}"


@pytest.fixture(scope="module")
def unwritable(tmp_path_factory):
    from tests.faults import unwritable_directory

    directory = tmp_path_factory.mktemp("unwritable")
    with unwritable_directory(directory) as path:
        yield path


@pytest.mark.parametrize(
    ("command", "option", "fault"),
    [(path, param.opts[0], fault) for path, param in PATH_OPTIONS for fault in FAULTS[_role(param)]],
    ids=lambda v: " ".join(v) if isinstance(v, tuple) else v,
)
def test_cli_filesystem_faults_are_one_line_exit_2(command, option, fault, tmp_path, unwritable):
    """Found: tracebacks for --hf-config DIR, outputs under a regular file, unwritable or
    immutable output directories, 300-character names; --hf-config /dev/zero read until OOM."""
    param = next(p for p in COMMANDS[command].params if p.opts[0] == option)
    bad = fault_path(fault, _role(param), tmp_path, unwritable)
    base = [a.replace("{tmp}", str(tmp_path)) for a in REQUIRED_ARGS.get(command, [])]
    if isinstance(param, click.Argument):  # a positional path (posenc conform export DIRECTORY)
        args = [*command, *base, bad]
    else:
        args = [*command, *base, option, bad]  # the last value of an option wins
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(tmp_path)
            _stub_slow_backends(mp)
            result = CliRunner().invoke(cli_main, args, catch_exceptions=True)
    except _Reached:
        raise AssertionError(f"{args}: the fault was not noticed before the slow work") from None
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (args, result.exit_code, result.stderr)
    assert lines[0].startswith("posenc: error:"), lines[0]
    assert bad[:60] in lines[0], f"the message does not name the path: {lines[0]}"


# ---------------------------------------------------------------------------
# 4c. Every key of a benchmark profile with random values (posenc compare --set / --config).
# ---------------------------------------------------------------------------
#
# Each example sets one or two keys of the smoke profile to hostile values: nan, inf, huge
# integers, wrong types, unknown names. Loading must give PosencError (one line) or a profile
# that the checks before the first run (``check_fits``) and the grid accept or refuse with
# PosencError; every run spec of an accepted profile has finite numbers. Never a traceback.


def _profile_keys() -> list[str]:
    from posenc.compare.profile import Profile

    keys = []
    for f in dataclasses.fields(Profile):
        nested = typing.get_type_hints(Profile)[f.name]
        if dataclasses.is_dataclass(nested):
            keys += [f"{f.name}.{g.name}" for g in dataclasses.fields(nested)]
        else:
            keys.append(f.name)
    return keys + [
        "encoding_config.rope.base",
        "encoding_config.ropee.base",
        'encoding_config."posenc.zzz:X".a',
    ]


PROFILE_KEYS = _profile_keys()
PROFILE_VALUES = [
    "nan", "inf", "-inf", "-1", "0", "1", "0.5", str(2**63), "1" + "0" * 30, "1e308", "1e400", "true",
    '"zzz"', '""', '"all"', "[]", '["zzz"]', '["ropee"]', '["rope"]', "[nan]", "[inf, 1.0]", f"[{2**63}]",
    "[-1]", "[0.0]", "[1.0, 1.0]", "[1, [2]]", "{}", '{zzz = "copy"}', '{copy = "nosuch"}', "{a = {b = 1}}",
]  # fmt: skip


def _finite_numbers(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite_numbers(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite_numbers(v) for v in value)
    return True


def _sound(prof, items) -> None:
    """A profile the loader accepted: the checks before the first run accept it or refuse it with
    one line, and every run spec of its grid has finite numbers."""
    from posenc.compare.grid import build_grid
    from posenc.compare.profile import check_fits

    try:
        check_fits(prof, "cpu", memory=8 << 30)
        specs = build_grid(prof).specs
    except posenc.PosencError as exc:
        assert "\n" not in str(exc), (items, str(exc))
        return
    assert specs and all(_finite_numbers(spec.to_dict()) for spec in specs), items


PROFILE_SETTINGS = st.lists(
    st.tuples(st.sampled_from(PROFILE_KEYS), st.sampled_from(PROFILE_VALUES)), min_size=1, max_size=2
)


@given(settings=PROFILE_SETTINGS)
@settings(max_examples=200, deadline=None)
def test_profile_keys_random_values(settings):
    from posenc.compare.profile import load_profile

    items = [f"{key}={value}" for key, value in settings]
    try:
        prof = load_profile("smoke", items)
    except posenc.PosencError as exc:
        assert "\n" not in str(exc), (items, str(exc))
        return
    _sound(prof, items)


@given(settings=PROFILE_SETTINGS)
@settings(max_examples=100, deadline=None)
def test_cli_profile_keys_random_values_are_one_line_exit_2(settings, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("config")
    args = ["compare", "--profile", "smoke", "--out", str(tmp / "out")]
    items = [f"{key}={value}" for key, value in settings]
    for item in items:
        args += ["--set", item]
    started = []

    def start(prof, **kwargs):  # where the runs would start: keep the profile the command built
        started.append(prof)
        raise _Reached

    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(posenc.compare, "compare", start)
            result = CliRunner().invoke(cli_main, args, catch_exceptions=True)
    except _Reached:
        _sound(started[0], items)
        return
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        args, f"{type(result.exception).__name__}: {result.exception}"
    )  # fmt: skip
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("posenc: error:"), (
        args,
        result.stderr,
    )
    assert not (tmp / "out" / "runs").exists()


# ---------------------------------------------------------------------------
# 5. Regression tests, one per bug the fuzzing found (all fixed; see docs/guarantees.md).
# ---------------------------------------------------------------------------


def test_check_int_names_the_parameter_for_float_tensors():
    """Found: check_int(torch.tensor(2.0)) leaked torch's '... converted to an index'."""
    with pytest.raises(TypeError, match="dim"):
        posenc.build("sinusoidal", dim=torch.tensor(2.0))
    with pytest.raises(TypeError, match="head_dim"):
        posenc.build("rope", head_dim=torch.tensor([8, 8]))
    assert posenc.build("sinusoidal", dim=torch.tensor(8)).config.dim == 8


def test_positions_past_2_pow_53_are_refused():
    """Found: positions > 2**53 are not float64 integers, so every table silently rounded them."""
    enc = posenc.build("rope", head_dim=8)
    q = torch.randn(1, 1, 2, 8)
    with pytest.raises(ValueError, match="positions"):
        enc.rotate(q, q, q_positions=torch.tensor([[2**60, 2**60 + 1]]), k_positions=torch.tensor([[0, 1]]))
    edge = torch.tensor([[2**53 - 1, 2**53]])
    assert torch.isfinite(enc.rotate(q, q, q_positions=edge, k_positions=edge)[0]).all()


def test_alibi_huge_head_count_is_an_error_not_a_hang():
    """Found: ALiBi(num_heads=2**40) built its slopes in a Python loop until memory ran out."""
    with pytest.raises(ValueError, match="num_heads"):
        posenc.build("alibi", num_heads=HUGE)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_xpos_overflow_is_an_error_not_inf(dtype):
    """Found: xPos's zeta^(n/B) overflowed to inf silently at large positions."""
    enc = posenc.build("xpos", head_dim=8)
    q = torch.randn(1, 1, 2, 8, dtype=dtype)
    far = torch.tensor([[300_000, 300_001]])
    with pytest.raises(ValueError, match="positions"):
        enc.rotate(q, q, q_positions=far, k_positions=far)
    near = torch.tensor([[300, 301]])
    out = enc.rotate(q, q, q_positions=near, k_positions=near)
    assert all(torch.isfinite(t).all() for t in out)


def test_cli_usage_errors_are_one_line():
    """Found: click's usage errors printed 4 lines (usage, hint, blank, error)."""
    runner = CliRunner()
    for args in (
        ["bogus"],
        ["--bogus"],
        ["list", "--format", "xml"],
        ["show"],
        ["show", "rope", "--dim", "x"],
    ):
        result = runner.invoke(cli_main, args)
        assert result.exit_code == 2, args
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    ok = runner.invoke(cli_main, ["--help"])
    assert ok.exit_code == 0 and "Usage" in ok.stdout


def test_cli_rope_inspect_rejects_bad_sizes():
    """Found: --partial-rotary-factor inf (OverflowError) and --head-dim 10**8 (MemoryError) tracebacks."""
    runner = CliRunner()
    for option, value in (("--partial-rotary-factor", "inf"), ("--head-dim", str(10**8))):
        result = runner.invoke(cli_main, ["rope", "inspect", option, value])
        assert result.exit_code == 2 and option in result.stderr, (option, result.stderr)


def test_cli_plot_rejects_sizes_it_cannot_draw(tmp_path):
    """Found: `posenc plot alibi --kind bias --num-heads 100000` hung; --positions 10**8 died allocating."""
    runner = CliRunner()
    for option in ("--positions", "--num-heads", "--d-model", "--dpi"):
        args = ["plot", "alibi", "--kind", "bias", "-o", str(tmp_path / "b.png"), option, str(10**8)]
        result = runner.invoke(cli_main, args)
        assert result.exit_code == 2 and option in result.stderr, (option, result.stderr)


def test_cli_report_checks_dpi_before_working(tmp_path):
    """Found: `posenc report --dpi -1` ran ~45 s of seed checks before rejecting the dpi."""
    with pytest.MonkeyPatch.context() as mp:
        _stub_slow_backends(mp)  # reaching build_report would raise _Reached
        result = CliRunner().invoke(cli_main, ["report", "-o", str(tmp_path / "r"), "--dpi", "-1"])
    assert result.exit_code == 2 and "--dpi" in result.stderr, result.stderr


def test_cli_show_rejects_sizes_it_cannot_draw():
    """Found: `posenc show NAME --positions 10**8` hung or died with an allocation traceback."""
    runner = CliRunner()
    for option in ("--positions", "--dim", "--heads"):
        result = runner.invoke(cli_main, ["show", "rope", option, str(10**8)])
        assert result.exit_code == 2 and option in result.stderr, (option, result.stderr)


def test_fire_accepts_integer_init_c():
    """Found: FIRE(init_c=1) made an int tensor require grad (RuntimeError)."""
    enc = posenc.build("fire", num_heads=2, init_c=1)
    assert torch.isfinite(enc.bias(3, 3)).all()


def test_learned_rejects_init_std_that_overflows():
    """Found: init_std=1e300 gave an inf table; init scales are now <= 1e6."""
    with pytest.raises(ValueError, match="init_std"):
        posenc.build("learned", dim=4, init_std=1e300)


def test_t5_num_buckets_error_names_num_buckets():
    """Found: the error named only max_distance (and 2**30 buckets were about to be allocated)."""
    with pytest.raises(ValueError, match="num_buckets"):
        posenc.build("t5", num_heads=2, num_buckets=2**30)


def test_rope_attention_factor_that_overflows_is_rejected():
    """Found: attention_factor=1e300 gave inf cos/sin (fixed in rope_scaling.compute)."""
    with pytest.raises(ValueError, match="attention_factor"):
        scaling = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 16}
        posenc.build("rope", head_dim=8, scaling={**scaling, "attention_factor": 1e300})


def test_rope_ntk_huge_factor_is_a_value_error():
    """Found: ntk with factor=1e300 raised OverflowError (fixed in rope_scaling.compute)."""
    with pytest.raises(ValueError, match="factor"):
        posenc.build("rope", head_dim=8, scaling={"rope_type": "ntk", "factor": 1e300})


# ---------------------------------------------------------------------------
# 5b. Hostile records: random JSON in the fields of a run record that name code or files.
# ---------------------------------------------------------------------------
#
# A genuine record is rewritten (fields replaced by random JSON values, or by names that point at
# code or outside the directory) and sealed again (run id, checksum: anyone can). Reading the
# directory never raises, never hangs and never tries to import a module the record names
# (``posenc_fuzz_*`` modules do not exist; a finder on ``sys.meta_path`` sees every attempt);
# loading the run is a model or one PosencError, a spec refused as untrusted, not imported.

FUZZ_MODULE = "posenc_fuzz_sentinel"
NAMING_CODE = [
    f"{FUZZ_MODULE}:X",
    f"{FUZZ_MODULE}.sub:Y",
    "os:system",
    "this:X",
    "rope",
    "copy",
    "lm",
    "irope:2",
]
NAMING_FILES = ["/dev/zero", "../../../etc/passwd", "..", ".", "", "x.pt", "a/b.pt", "\x00", "$\\x$"]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
NAMING = st.sampled_from(NAMING_CODE + NAMING_FILES)
HOSTILE_VALUES = st.one_of(
    JSON_VALUES,
    NAMING,
    st.lists(st.tuples(st.sampled_from(["encoding", "task", "x"]), NAMING, NAMING).map(list), max_size=2),
    st.dictionaries(
        NAMING, st.dictionaries(st.sampled_from(["inner", "base"]), NAMING, max_size=1), max_size=2
    ),
)
CODE_AND_FILE_FIELDS = [
    ("spec", "encoding"), ("spec", "task"), ("spec", "schedule"), ("spec", "imports"), ("spec", "encoding_config"),
    ("spec", "model", "scale_embeddings"), ("spec", "seed"), ("label",), ("weights",), ("weights", "file"),
    ("weights", "bytes"), ("weights", "sha256"),
]  # fmt: skip


class _ImportWatch:
    """A finder that finds nothing and remembers every attempt to import a ``posenc_fuzz_`` module."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, name, path=None, target=None):
        if name.startswith(FUZZ_MODULE):
            self.attempts.append(name)
        return None


@pytest.fixture(scope="module")
def genuine_record(tmp_path_factory):
    from tests.records import make_payload, make_spec

    from posenc.records.store import ResultStore

    spec = make_spec()
    return ResultStore(tmp_path_factory.mktemp("genuine")).write(spec, make_payload(spec))


@given(
    changes=st.lists(st.tuples(st.sampled_from(CODE_AND_FILE_FIELDS), HOSTILE_VALUES), min_size=1, max_size=3)
)
@settings(max_examples=60)
def test_hostile_records_are_read_as_data(changes, genuine_record):
    import json

    from tests.records import no_hang, rewrite

    from posenc.core.errors import PosencError
    from posenc.records.files import safe_name
    from posenc.records.store import ResultStore, load_weights
    from posenc.results import trained

    def change(data):
        for path, value in changes:
            node = data
            for key in path[:-1]:
                node = node.setdefault(key, {}) if isinstance(node, dict) else {}
            if isinstance(node, dict):
                node[path[-1]] = value

    hostile = genuine_record.with_name("hostile.json")
    try:
        rewrite(genuine_record, change, hostile)
    except ValueError:  # NaN in a value: the checksum cannot be recomputed; written unsealed
        data = json.loads(genuine_record.read_text())
        change(data)
        hostile.write_text(json.dumps(data))
    watch = _ImportWatch()
    sys.meta_path.insert(0, watch)
    try:
        with no_hang(30):
            records = ResultStore(genuine_record.parents[2]).records(warn=lambda _: None)
            for record in records:
                assert isinstance(record["label"], str) and isinstance(record["spec"]["task"], str)
                name = safe_name(record["spec"]["task"])
                assert Path(name).name == name and name not in (".", "..")
            try:
                load_weights(hostile)
            except PosencError as exc:
                assert "\n" not in str(exc)
            try:
                trained.load_run(hostile)
            except PosencError as exc:  # the untrusted refusal, or why the record or weights are unusable
                assert "\n" not in str(exc) and "cannot import module" not in str(exc), exc
    finally:
        sys.meta_path.remove(watch)
        hostile.unlink(missing_ok=True)
        hostile.with_suffix(".pt").unlink(missing_ok=True)
    assert not watch.attempts, watch.attempts


# ---------------------------------------------------------------------------
# 6. Regression tests for what a hostile user found (see docs/guarantees.md).
# ---------------------------------------------------------------------------


def test_scaled_sinusoidal_init_scale_is_bounded():
    """Found: init_scale=1e300 gave inf and NaN from finite input (init_std was bounded, this was not)."""
    for bad in (1e300, -1e300, 1e7):
        with pytest.raises(ValueError, match="init_scale"):
            posenc.build("scaled_sinusoidal", dim=8, init_scale=bad)
    out = posenc.build("scaled_sinusoidal", dim=8, init_scale=1e6).embed(torch.randn(1, 4, 8))
    assert torch.isfinite(out).all()


def test_numpy_scalars_in_configs_become_python_values():
    """Found: dim=np.int64(8) was accepted but config.to_json() raised "int64 is not JSON serializable"."""
    import json

    import numpy as np

    from posenc.nn.transformer import TransformerConfig

    config = posenc.build("sinusoidal", dim=np.int64(8), base=np.float32(100.0)).config
    assert type(config.dim) is int and type(config.base) is float
    assert json.loads(config.to_json()) == {"dim": 8, "base": 100.0}
    assert type(posenc.build("sinusoidal", dim=torch.tensor(8)).config.dim) is int
    scaling = {"rope_type": "linear", "factor": np.float64(2.0)}
    rope = posenc.build("rope", head_dim=np.int32(8), scaling=scaling).config
    assert json.loads(rope.to_json())["scaling"] == {"rope_type": "linear", "factor": 2.0}
    model = TransformerConfig(
        vocab_size=np.int64(11), causal=np.bool_(True), encoding_config={"base": np.int64(100)}
    )
    assert json.loads(json.dumps(model.to_dict()))["vocab_size"] == 11
    assert model.causal is True and type(model.encoding_config["base"]) is int
    assert TransformerConfig.from_dict(model.to_dict()) == model
    with pytest.raises(TypeError, match="dim"):
        posenc.build("sinusoidal", dim=np.float64(8.5))


@pytest.mark.parametrize("name", NAMES)
def test_sizes_that_overflow_inside_torch_are_named(name):
    """Found: shaw(max_relative_distance=2**62) raised torch's "Overflow when unpacking long long";
    every integer config field past 2**53 did the same (or "int too big to convert")."""
    cls = posenc.ENCODINGS[name]
    for field in dataclasses.fields(cls.Config):
        for value in (2**62, 2**64, -(2**63)):
            config = {**_base_config(cls), field.name: value}
            try:
                posenc.build(name, **config)
            except (ValueError, TypeError) as exc:
                _assert_names(exc, [field.name])
            except Exception as exc:  # noqa: BLE001
                if not _allocation_failure(exc, {field.name: value}):
                    raise AssertionError(f"{name}.{field.name}={value}: {type(exc).__name__}: {exc}") from exc


@pytest.mark.parametrize("name", NAMES)
def test_meta_device_inputs_are_refused_by_name(name):
    """Found: meta tensors reached ".item() cannot be called on meta tensors" inside the hooks."""
    enc = posenc.build_for_model(name, d_model=MODEL_DIMS["dim"], num_heads=MODEL_DIMS["num_heads"])
    d, heads = _model_dim(enc), getattr(enc.config, "num_heads", 2)
    calls = {
        "additive": lambda: enc.embed(torch.zeros(1, 3, d, device="meta")),
        "rotary": lambda: enc.rotate(torch.zeros(1, heads, 3, d, device="meta"), torch.zeros(1, heads, 3, d)),
        "bias": lambda: enc.bias(3, 3, device="meta"),
        "relative": lambda: enc.scores(
            torch.zeros(1, heads, 3, d, device="meta"), torch.zeros(1, heads, 3, d)
        ),
        "contextual": lambda: enc.scores(
            torch.zeros(1, heads, 3, d, device="meta"),
            torch.zeros(1, heads, 3, d),
            torch.zeros(1, heads, 3, 3),
        ),
    }
    if enc.kind in calls:
        with pytest.raises(ValueError, match="meta device") as info:
            calls[enc.kind]()
        _assert_names(info.value, ["x", "q", "device"])
    if enc.kind not in ("none", "contextual"):
        positions = torch.arange(3, device="meta")[None]
        with pytest.raises(ValueError, match="meta device"):
            _call_hook(enc, batch=1, seq=3, dtype=torch.float32, positions=positions, dim_offset=0)
    with pytest.raises(ValueError, match="tokens is on the meta device"):
        _model(name)(torch.zeros(1, 3, dtype=torch.long, device="meta"))


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int16, torch.int32])
def test_small_integer_token_ids_are_accepted(dtype):
    """Found: int8/uint8 token ids failed inside nn.Embedding ("Expected ... Long, Int")."""
    model = _model("rope")
    tokens = torch.tensor([[1, 2, 3, 10]])
    with torch.no_grad():
        torch.testing.assert_close(model(tokens.to(dtype)), model(tokens), rtol=0, atol=0)


def test_kv_cache_refuses_a_dtype_change():
    """Found: a float32 step after float64 ones (model.float() mid-decoding) failed inside SDPA."""
    for name in ("rope", "alibi", "shaw", "cope"):
        model = _model(name)
        cache = model.new_cache()
        with torch.no_grad():
            model.double()(torch.tensor([[1, 2]]), cache=cache)
            with pytest.raises(ValueError, match="cache holds keys of dtype torch.float64"):
                model.float()(torch.tensor([[3]]), cache=cache)
            for layer in cache:
                layer.reset()
            model(torch.tensor([[3]]), cache=cache)  # after reset(): fine


def test_to_hf_of_a_non_dict_is_a_named_type_error():
    """Found: hf.to_hf(None) raised "'NoneType' object is not iterable"."""
    from posenc import hf

    for bad in (None, [("head_dim", 8)], "rope"):
        with pytest.raises(TypeError, match="rope must be a dict"):
            hf.to_hf(bad)


def test_from_hf_odd_head_dim_names_head_dim():
    """Found: an odd head_dim was reported as "dim (rotary_dim) must be an even integer >= 2, even"."""
    from posenc import hf

    with pytest.raises(ValueError, match=r"^head_dim must be an even integer >= 2") as info:
        hf.from_hf({"head_dim": 7})
    assert "even, got" not in str(info.value)
    with pytest.raises(ValueError, match="partial_rotary_factor"):
        hf.from_hf({"head_dim": 10, "partial_rotary_factor": 0.5})
    with pytest.raises(ValueError, match=r"^dim must be an even integer >= 2, got 7$"):
        posenc.build("sinusoidal", dim=7)  # check_int said "even integer >= 2, even"


def _cli(*args, stubbed: bool = True):
    with pytest.MonkeyPatch.context() as mp:
        if stubbed:
            _stub_slow_backends(mp)
        return CliRunner().invoke(cli_main, [str(a) for a in args])


def _one_line_error(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.stderr)
    assert lines[0].startswith("posenc: error:"), lines[0]
    return lines[0]


def test_cli_huge_seeds_and_threads_are_refused_before_any_run(tmp_path):
    """Found: --seeds 99999999999999999999999 failed in every run (rc 1) without naming --seeds;
    --threads 10000 ran ~60x slower and --threads -1 was stored in the run spec."""
    from posenc.compare import compare
    from posenc.compare.executor import max_threads
    from posenc.compare.grid import build_grid
    from posenc.compare.profile import get_profile

    out = tmp_path / "r"
    for args, word in (
        (["--seeds", "99999999999999999999999"], "--seeds"),
        (["--seeds", "-1"], "--seeds"),
        (["--threads", "10000"], "--threads"),
        (["--threads", "-1"], "--threads"),
        (["--threads", "0"], "--threads"),
    ):
        line = _one_line_error(_cli("compare", "--profile", "smoke", "--out", out, *args))
        assert word in line, line
    line = _one_line_error(_cli("compare", "--profile", "smoke", "--threads", "10000", "--out", out))
    assert f"[1, {max_threads()}]" in line
    for bad in (-1, 0, max_threads() + 1):
        with pytest.raises(ValueError, match="threads"):
            build_grid(get_profile("smoke"), threads=bad)
        with pytest.raises(ValueError, match="threads"):
            compare("smoke", threads=bad, out=out, show_progress=False, log=lambda _: None)
    with pytest.raises(ValueError, match="seeds"):
        build_grid(get_profile("smoke"), seeds=(2**64,))
    assert not (out / "runs").exists() or not list((out / "runs").rglob("*.json"))


def test_cli_bare_group_is_one_line_naming_the_commands():
    """Found: bare `posenc` printed the whole help as one error line."""
    line = _one_line_error(_cli())
    assert "missing command" in line and "compare" in line and "Usage" not in line
    assert "inspect" in _one_line_error(_cli("rope"))


def test_cli_rope_plot_says_the_file_it_wrote(tmp_path):
    """Found: `--plot ro` wrote ro.png but printed "wrote ro"; `--plot ''` wrote ".png"."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        result = CliRunner().invoke(cli_main, ["rope", "inspect", "--head-dim", "8", "--plot", "ro"])
        assert result.exit_code == 0, result.output
        assert "wrote ro.png" in result.output and (tmp_path / "ro.png").exists()
        assert not (tmp_path / "ro").exists()
        assert "--plot" in _one_line_error(CliRunner().invoke(cli_main, ["rope", "inspect", "--plot", ""]))
        assert not (tmp_path / ".png").exists()
        assert ".xyz" in _one_line_error(CliRunner().invoke(cli_main, ["rope", "inspect", "--plot", "a.xyz"]))


def test_cli_rope_a_key_given_twice_is_an_error():
    """Found: `--factor 4 --param factor=2` silently used 2."""
    line = _one_line_error(
        _cli("rope", "inspect", "--scaling", "linear", "--factor", "4", "--param", "factor=2")
    )
    assert "'factor'" in line and "--factor" in line and "twice" in line
    line = _one_line_error(
        _cli("rope", "inspect", "--scaling", "linear", "--param", "factor=4", "--param", "factor=2")
    )
    assert "twice" in line


def test_cli_hf_config_errors_name_the_file(tmp_path):
    """Found: JSON and UTF-8 errors of --hf-config did not say which file; /dev/zero was read until OOM
    (now refused before it is opened: not a regular file)."""
    bad_json, bad_utf8 = tmp_path / "bad.json", tmp_path / "latin1.json"
    bad_json.write_text('{"head_dim": 8,')
    bad_utf8.write_bytes(b'{"name": "\xe9"}')
    for path, word in (
        (bad_json, "not valid JSON"),
        (bad_utf8, "not UTF-8"),
        ("/dev/zero", "not a regular file"),
    ):
        line = _one_line_error(_cli("rope", "inspect", "--hf-config", path))
        assert str(path) in line and word in line, line


def test_hf_config_nested_or_with_endless_numbers_is_one_line(tmp_path):
    """Found: a config.json nested thousands deep, or holding a 5000-digit number, was a traceback."""
    files = {
        "nested.json": "[" * 100000 + "]" * 100000,
        "deep.json": '{"a": ' * 40 + "1" + "}" * 40,
        "digits.json": '{"head_dim": ' + "1" * 5000 + "}",
        "huge.json": '{"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 1' + "0" * 400 + "}",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        for args in (
            ["rope", "inspect", "--hf-config", path],
            ["conform", "export", "--hf-config", path, tmp_path / "v"],
        ):
            line = _one_line_error(_cli(*args, stubbed=False))
            assert name in line or "rope_theta" in line, line


def test_hf_apply_and_remove_refuse_what_is_not_a_model_by_name():
    """Found: posenc.hf.apply(None) was an AttributeError from inside apply."""
    for model in (None, "Qwen/Qwen2-0.5B", torch.nn.Linear(2, 2)):
        for function in (posenc.hf.apply, posenc.hf.remove):
            with pytest.raises(posenc.PosencTypeError, match="model must be a loaded transformers model"):
                function(model)


def test_cli_show_and_plot_name_their_own_options(tmp_path):
    """Found: `show learned --positions 2000` advised "Raise max_len" (no CLI option does);
    `plot --positions 1` named the library's num_positions."""
    line = _one_line_error(_cli("show", "learned", "--positions", "2000"))
    assert "--positions must be <= 1024" in line and "Raise" not in line
    line = _one_line_error(
        _cli(
            "plot",
            "sinusoidal",
            "--kind",
            "similarity",
            "--positions",
            "1",
            "-o",
            tmp_path / "x.png",
            stubbed=False,
        )
    )
    assert "--positions" in line and "num_positions" not in line


def test_cli_show_caps_the_terminal_table_and_says_where_the_rest_is():
    """Found: `show cope --positions 2048 --dim 256` (within bounds) took 88 s and printed 1.2 MB."""
    import json

    from posenc.cli.catalog_command import MAX_TABLE_COLUMNS, MAX_TABLE_ROWS

    result = _cli("show", "cope", "--positions", "2048", "--dim", "256")
    assert result.exit_code == 0, result.output
    assert len(result.stdout) < 20_000, len(result.stdout)
    assert (
        "showing 32 of 2048 rows and 16 of 2048 columns" in result.stdout and "--format json" in result.stdout
    )
    # the rows shown are the first rows of the full data (--format json), same numbers
    for name in ("cope", "shaw", "alibi", "rope", "complex_order", "sinusoidal"):
        args = ["show", name, "--positions", "40", "--dim", "20", "--heads", "2"]
        table = _cli(*args).stdout
        full = json.loads(_cli(*args, "--format", "json").stdout)["values"]
        cells = [
            [c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines() if line.startswith("│")
        ]
        rows = [c for c in cells if len(c) == 1 + min(MAX_TABLE_COLUMNS, len(full[0])) and c[0].isdigit()]
        rows = rows[-MAX_TABLE_ROWS:]  # sinusoidal: the values table is the last one
        assert len(rows) == MAX_TABLE_ROWS, name
        for i, row in enumerate(rows):
            want = [
                "-inf" if v is None else f"{v:.3f}".replace("-0.000", "0.000")
                for v in full[i][: len(row) - 1]
            ]
            assert row[1:] == want, (name, i)


def test_cli_a_corrupt_record_that_cannot_be_moved_aside_is_one_line(tmp_path):
    """Found: quarantining a corrupt record in a directory that refuses renames printed a traceback."""
    from tests.faults import unwritable_directory

    from posenc.compare.grid import build_grid
    from posenc.compare.profile import get_profile
    from posenc.records.store import ResultStore

    out = tmp_path / "r"
    spec = build_grid(get_profile("smoke"), encodings=("nope",), tasks=("copy",), seeds=(0,))
    path = ResultStore(out).path_for(spec.specs[0])
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    args = ["compare", "--profile", "smoke", "--encodings", "nope", "--tasks", "copy", "--seeds", "0"]
    with unwritable_directory(path.parent) as locked, pytest.MonkeyPatch.context() as mp:
        if locked != path.parent:  # no way to lock a real directory here: refuse the rename instead
            mp.setattr("os.replace", _refuse_rename)
        line = _one_line_error(_cli(*args, "--no-report", "--out", out, stubbed=False))
    assert str(path) in line, line


def _refuse_rename(src, dst):
    import errno
    import os

    raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(src), None, str(dst))


# ---------------------------------------------------------------------------
# 6. Plug-ins (tests/outoftree, installed nowhere): random configs, random selections of the
#    contract on broken classes, random values at the command line.
# ---------------------------------------------------------------------------

OUT_OF_TREE = Path(__file__).parents[1] / "outoftree"
PLUGINS = ["posenc_demo:LogDecayBias", "posenc_plain:DistanceBias"]
# each broken class and the property that must catch it (tests/outoftree/posenc_broken)
BROKEN = {
    "posenc_broken:DroppedPair": "shapes_and_dtypes",
    "posenc_broken:IgnoresLayout": "layout",
    "posenc_broken:NaNOutput": "offsets",
    "posenc_broken:QueryTerm": "relative_invariance",
    "posenc_broken:PerHeadTurn": "grouped_kv",
    "posenc_broken:ClaimsScaling": "capabilities",
    "posenc_broken:LengthTurn": "kv_cache",
    "posenc_broken:NaNTurn": "grouped_kv",
    "posenc_broken:NaNRoPE": "capabilities",
    "posenc_broken:DroppedKeyPair": "padding",
}
FAST = [name for name in posenc.testing.FAST_PROPERTIES if name != "gradients"]  # gradcheck: slow


@pytest.fixture(scope="module")
def outoftree():
    sys.path.insert(0, str(OUT_OF_TREE))
    try:
        yield
    finally:
        sys.path.remove(str(OUT_OF_TREE))


@pytest.mark.parametrize("spec", PLUGINS)
@given(data=st.data())
@settings(max_examples=40)
def test_plugin_build_random_configs(outoftree, spec, data):
    """A plug-in's Config errors are posenc's (one line at the command line), whatever its
    validate raises: PosencError / PosencTypeError naming the field. (What a value the plug-in
    accepts does to its own hook is the plug-in's contract: ``posenc check``.)"""
    cls = posenc.get_encoding_class(spec)
    config, mutated = data.draw(mutated_configs(cls))
    try:
        cls.Config.from_dict(config, owner=spec)
    except Exception as exc:  # noqa: BLE001 - the contract is about which exceptions
        assert isinstance(exc, posenc.PosencError), f"{type(exc).__name__}: {exc}"
        _assert_names(exc, list(mutated) or ["config"])


@given(
    spec=st.sampled_from(sorted(BROKEN)),
    chosen=st.lists(st.sampled_from(FAST), min_size=1, max_size=4, unique=True),
    dims=st.sampled_from([(16, 2), (16, 4), (8, 1), (24, 3), (32, 2)]),
)
@settings(max_examples=30)
def test_the_contract_on_broken_plugins_random_selections(outoftree, spec, chosen, dims):
    """Any selection of properties, any small model: a report (never an exception from inside),
    every failure with a reason, NaN named wherever it was compared, and the property that
    catches each broken class failing whenever it is run and applies."""
    d_model, num_heads = dims
    try:
        report = posenc.testing.check_encoding(spec, properties=chosen, d_model=d_model, num_heads=num_heads)
    except posenc.PosencError as exc:  # a model the class cannot be built for: said, naming why
        _assert_names(exc, ["head_dim", "num_heads", "d_model"])
        return
    assert [r.name for r in report.results] == chosen
    for result in report.failures:
        assert result.detail and "Expected reduction dim" not in result.detail, result.line()
        assert not result.detail.startswith("raised"), result.line()  # a reason, not torch's error
        if "NaN" in spec:
            assert "NaN" in result.detail, result.line()
    catcher = BROKEN[spec]
    if catcher in chosen and report[catcher].passed is not None:
        assert report[catcher].passed is False, str(report)


@given(
    value=st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1e400", '"x"', "[]", "{}", "null", "true", "2"])
)
@settings(max_examples=24)
def test_cli_check_of_a_plugin_with_random_config_values(outoftree, value):
    """``posenc check`` of a plug-in whose validate raises plain ValueError / TypeError: exit 0
    (a value it takes), or one line and exit 2; never a traceback or exit 1."""
    result = CliRunner().invoke(
        cli_main,
        ["check", "posenc_plain:DistanceBias", "--property", "declares", "--config", f"scale={value}"],
    )
    assert "Traceback" not in result.output and result.exit_code in (0, 2), (value, result.output)
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("posenc: error:") and "scale" in lines[0], (
            result.stderr
        )


@given(
    spec=st.sampled_from(["posenc_plain:Echo", "posenc_broken:MarkerTask"]),
    lengths=st.lists(st.integers(min_value=-2, max_value=40), min_size=0, max_size=5),
)
@settings(max_examples=20)
def test_the_task_contract_on_plugins_random_lengths(outoftree, spec, lengths):
    try:
        report = posenc.testing.check_task(spec, lengths=lengths)
    except posenc.PosencError as exc:
        _assert_names(exc, ["lengths"])
        return
    assert report.passed is spec.endswith("Echo"), str(report)
    assert all(r.detail for r in report.results)
