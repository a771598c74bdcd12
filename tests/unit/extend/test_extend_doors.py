"""``posenc extend`` under hostile input: checkpoints and texts that fail in one line before any work,
checkpoint identity by content (a stale-weights resume recomputes), the versions a resume must match,
records that cannot brick ``OUT``, and invocations sharing ``OUT`` (claims, their own files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.records import no_hang

from posenc.cli import main
from posenc.core.errors import PosencError
from posenc.extend import cell_store, checkpoint, content
from posenc.extend import documents as texts
from posenc.extend import protocol as protocols
from posenc.records.store import checksum

transformers = pytest.importorskip("transformers")


def _refused(args: list[str], words: str) -> str:
    result = CliRunner().invoke(main, ["extend", *args])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("posenc: error:"), result.output
    assert words in lines[0], lines[0]
    return lines[0]


def _plan(model: Path | str, tmp_path: Path, *extra: str) -> list[str]:
    return ["--model", str(model), "--plan", "--device", "cpu", "--lengths", "32,64", "--passkey-lengths", "",
            "--out", str(tmp_path / "o"), *extra]  # fmt: skip


def _copy(source: Path, tmp_path: Path, name: str = "m") -> Path:
    target = tmp_path / name
    shutil.copytree(source, target)
    return target


# --- checkpoints: one line, the file named, before any work --------------------------------------


def _tiny_gguf(path: Path) -> Path:
    """A small GGUF file (one tensor) written with the gguf package's own writer."""
    gguf = pytest.importorskip("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.zeros((64, 256), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("damage", ["truncated", "empty", "not-gguf", "header"])
def test_a_damaged_gguf_is_one_line_naming_it_before_any_conversion(tmp_path, monkeypatch, damage):
    """Found: ``head -c 1000000 model.gguf > t.gguf; posenc extend --model t.gguf --plan`` was a
    ~50-line struct.error traceback (from transformers' converter)."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    whole = _tiny_gguf(tmp_path / "whole.gguf").read_bytes()
    path = tmp_path / "t.gguf"
    path.write_bytes(
        {
            "truncated": whole[: len(whole) - 1000],
            "empty": b"",
            "not-gguf": b"hello\n" * 100,
            "header": b"GGUF\x03\x00\x00\x00" + b"\xff" * 16,
        }[damage]  # fmt: skip
    )
    words = "an empty file" if damage == "empty" else "not a readable GGUF file"
    _refused(_plan(path, tmp_path), f"--model '{path}': {words}")
    assert not (tmp_path / "cache" / "models").exists() or not any((tmp_path / "cache" / "models").iterdir())


def _header_length(path: Path, length: int) -> None:
    data = path.read_bytes()
    path.write_bytes(length.to_bytes(8, "little") + data[8:])


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("truncated", "model.safetensors': its tensors need"),
        ("header-10^15", "model.safetensors': not a safetensors file: its header length 1000000000000000"),
        ("header-not-json", "model.safetensors': not a safetensors file: its header is not JSON"),
        ("only-model.pt", "no weights transformers reads next to config.json"),
        ("bin-not-zip", "pytorch_model.bin': not a zip archive"),
        ("missing-shard", "model-00002-of-00002.safetensors': not there (a shard index names it)"),
        ("fifo", "model.safetensors': a FIFO (named pipe)"),
    ],
)
def test_weights_transformers_cannot_read_are_one_line_in_the_plan(tiny_llama_dir, tmp_path, damage, words):
    """Found: a truncated safetensors, a 10^15 header length or a lone model.pt passed every check and
    failed cell after cell with the same error."""
    model = _copy(tiny_llama_dir, tmp_path)
    weights = model / "model.safetensors"
    if damage == "truncated":
        weights.write_bytes(weights.read_bytes()[:-100])
    elif damage == "header-10^15":
        _header_length(weights, 10**15)
    elif damage == "header-not-json":
        _header_length(weights, 16)
    elif damage == "only-model.pt":
        weights.rename(model / "model.pt")
    elif damage == "bin-not-zip":
        weights.unlink()
        (model / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00." * 100)
    elif damage == "missing-shard":
        weights.rename(model / "model-00001-of-00002.safetensors")
        index = {
            "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
        }
        (model / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        weights.unlink()
        os.mkfifo(weights)
    with no_hang():
        _refused(_plan(model, tmp_path), words)


def test_weights_missing_a_tensor_are_refused_not_filled_with_random_values(tiny_llama_dir, tmp_path):
    """transformers starts a tensor the file lacks from random values and says so in a warning only
    (hidden while posenc loads): perplexity of a half-random model, silently."""
    import safetensors.torch
    import torch

    model = _copy(tiny_llama_dir, tmp_path)
    tensors = safetensors.torch.load_file(model / "model.safetensors")
    del tensors["model.layers.1.mlp.down_proj.weight"]
    safetensors.torch.save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    found = checkpoint.Checkpoint(str(model), "m", "", {})
    with pytest.raises(PosencError, match=r"its weights lack 1 tensor\(s\) .*down_proj.*random values"):
        checkpoint.load(found, device="cpu", precision="fp32")
    tensors["model.layers.1.mlp.down_proj.weight"] = torch.zeros(8, 8)  # there, of another shape
    safetensors.torch.save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(PosencError, match="its weights do not fit its config"):
        checkpoint.load(found, device="cpu", precision="fp32")


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        ("no-files", "transformers cannot build its tokenizer (it has no tokenizer files"),
        ("corrupt", "transformers cannot build its tokenizer from tokenizer.json"),
        ("auto_map", "its tokenizer_config.json names code of its own to run (auto_map)"),
    ],
)
def test_a_tokenizer_that_cannot_be_built_is_one_line_in_the_plan(tiny_llama_dir, tmp_path, damage, words):
    model = _copy(tiny_llama_dir, tmp_path)
    if damage == "no-files":
        (model / "tokenizer.json").unlink()
        (model / "tokenizer_config.json").unlink()
    elif damage == "corrupt":
        (model / "tokenizer.json").write_text('{"model": {"type": "BPE", "vocab": [[[')
    else:
        settings = json.loads((model / "tokenizer_config.json").read_text())
        settings["auto_map"] = {"AutoTokenizer": ["evil_tokenizer.EvilTokenizer", None]}
        (model / "tokenizer_config.json").write_text(json.dumps(settings))
    _refused(_plan(model, tmp_path), words)


@pytest.mark.parametrize("kind", ["dangling", "loop", "fifo"])
def test_a_local_path_is_never_sent_to_the_hub(tmp_path, monkeypatch, kind):
    """Found: a dangling link ``org/name`` (or a loop) that looks like a hub id went to the hub: ~25 s of
    retries and 10 warning lines before "not here"."""

    def hub(*args, **kwargs):
        raise AssertionError("asked the hub")

    monkeypatch.setattr(checkpoint, "_hub", hub)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    link = Path("org") / "name"
    if kind == "dangling":
        link.symlink_to("gone")
        words = "a symbolic link to 'gone', which does not exist"
    elif kind == "loop":
        link.symlink_to("name")
        words = "a symbolic link that loops"
    else:
        os.mkfifo(link)
        words = "a FIFO (named pipe)"
    with no_hang():
        _refused(
            ["--model", "org/name", "--plan", "--out", str(tmp_path / "o")], f"--model 'org/name': {words}"
        )


# --- trained contexts, bounded as --context is ----------------------------------------------------


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"max_position_embeddings": 10**9}, "the config's trained context (1000000000 tokens) is past 2097152"),
        (
            {"max_position_embeddings": 64, "rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000.0,
                                                                "original_max_position_embeddings": 10**9}},
            "the config's trained context (1000000000 tokens) is past 2097152",
        ),
    ],
    ids=["max_position_embeddings", "original_max_position_embeddings"],
)  # fmt: skip
def test_a_trained_context_from_the_config_is_bounded_as_context_is(tiny_llama_dir, tmp_path, config, words):
    """Found: a config's original_max_position_embeddings of 1e9 became the trained context uncapped,
    while --context is capped at 2^21."""
    model = _copy(tiny_llama_dir, tmp_path)
    data = json.loads((model / "config.json").read_text())
    data.update(config)
    (model / "config.json").write_text(json.dumps(data))
    _refused(_plan(model, tmp_path), words)


def test_context_1_says_what_is_wrong_with_it(tiny_llama_dir, tmp_path):
    """Found: ``--context 1`` said "the config gives no max_position_embeddings"."""
    _refused(
        _plan(tiny_llama_dir, tmp_path, "--context", "1"),
        "--context 1: a trained context is at least 2 tokens",
    )


# --- texts: regular files only, nesting bounded ----------------------------------------------------


def _chars(text: str) -> list[int]:
    return list(text.encode())


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda d: os.mkfifo(d / "a.txt"), "a.txt': a FIFO (named pipe); give regular .txt or .jsonl files"),
        (lambda d: (d / "a.txt").symlink_to("/dev/zero"), "a.txt': a symbolic link to '/dev/zero', a character device"),
        (lambda d: (d / "a.jsonl").write_text('{"text": "x"}\n' + "[" * 100_000 + "]" * 100_000 + "\n"),
         "a.jsonl': line 2 nests lists or objects 100000 deep"),
        (lambda d: (d / "a.jsonl").write_text('{"text": ' + "1" * 5000 + "}\n"), "a.jsonl': line 1 is not JSON"),
    ],
    ids=["fifo", "dev-zero", "jsonl-nesting", "jsonl-huge-number"],
)  # fmt: skip
def test_a_text_that_is_no_regular_file_or_nests_too_deep_is_one_line(tmp_path, make, words):
    """Found: ``--text DIR`` holding a FIFO ``a.txt`` hung until killed; ``a.txt -> /dev/zero`` was read
    as 64 MiB of NUL bytes and counted as a document; a JSON line of nested brackets was a
    RecursionError."""
    folder = tmp_path / "texts"
    folder.mkdir()
    make(folder)
    with no_hang(), pytest.raises(PosencError) as caught:
        texts.documents(str(folder), _chars, count=1, length=8, prefix=[])
    assert words in str(caught.value)
    single = next(folder.iterdir())
    with no_hang(), pytest.raises(PosencError, match="--text"):
        texts.documents(str(single), _chars, count=1, length=8, prefix=[])


# --- fingerprints of content ---------------------------------------------------------------------


def test_a_file_is_hashed_once_per_content_and_never_trusted_by_its_times(tmp_path, monkeypatch):
    monkeypatch.setattr(content, "RACY_SECONDS", 0.0)
    store = tmp_path / "hashes.json"
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"a" * 4096)
    first = content.HashCache(store)
    digest = first.sha256(weights)
    first.save()
    again = content.HashCache(store)
    assert again.sha256(weights) == digest and again.hashed_bytes == 0  # from the cache
    stat = weights.stat()
    other = tmp_path / "other"
    other.write_bytes(b"b" * 4096)
    shutil.copyfile(other, weights)  # same size; then the old times put back, as cp -p / touch -r do
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert weights.stat().st_size == stat.st_size and weights.stat().st_mtime_ns == stat.st_mtime_ns
    third = content.HashCache(store)
    assert third.sha256(weights) != digest and third.hashed_bytes == 4096  # the change time moved: hashed


def test_a_file_changed_just_before_it_is_hashed_is_not_cached(tmp_path):
    """Racy: two writes within one tick of the file system's clock can leave the same times."""
    weights = tmp_path / "w"
    weights.write_bytes(b"x")
    cache = content.HashCache(tmp_path / "hashes.json")
    cache.sha256(weights)
    assert cache.entries == {}


def test_a_damaged_hash_cache_is_ignored(tmp_path, monkeypatch):
    monkeypatch.setattr(content, "RACY_SECONDS", 0.0)
    store = tmp_path / "hashes.json"
    for text in ("[" * 100_000, '{"version": 1, "entries": {"x": 5}}', "\xff", ""):
        store.write_text(text, encoding="latin-1")
        weights = tmp_path / "w"
        weights.write_bytes(b"y" * 10)
        assert content.HashCache(store).sha256(weights) == __import__("hashlib").sha256(b"y" * 10).hexdigest()


def test_the_fingerprint_covers_config_weights_and_tokenizer_and_nothing_else(tiny_llama_dir, tmp_path):
    model = _copy(tiny_llama_dir, tmp_path)
    names = [f.name for f in content.checkpoint_files(model)]
    assert names == ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    before = content.fingerprint(content.checkpoint_files(model), content.HashCache(tmp_path / "c.json"))
    (model / "README.md").write_text("notes")
    same = content.fingerprint(content.checkpoint_files(model), content.HashCache(tmp_path / "c.json"))
    settings = json.loads((model / "tokenizer_config.json").read_text())
    settings["model_max_length"] = 7
    (model / "tokenizer_config.json").write_text(json.dumps(settings))
    other = content.fingerprint(content.checkpoint_files(model), content.HashCache(tmp_path / "c.json"))
    assert before == same != other and before.startswith("content:")


def _tiny_protocol(model: Path, **changes) -> protocols.Protocol:
    base = protocols.Protocol(
        name="tiny", model=str(model), documents=2, lengths=(32, 64), chunk=64, workers=1, scalings=("none",),
        factors=(2.0,), device="cpu", tasks={},
    )  # fmt: skip
    return protocols.replace(base, **changes)


def _run(model: Path, out: Path, **options):
    from posenc import extend

    logged: list[str] = []
    result = extend.run(_tiny_protocol(model), out=out, show_progress=False, log=logged.append, **options)
    return result, logged


@pytest.mark.slow
def test_weights_replaced_with_their_size_and_time_kept_are_measured_again(
    tiny_llama_dir, other_tiny_llama_dir, tmp_path, monkeypatch
):
    """Found: another model's model.safetensors of the same size copied over with its time kept (cp -p,
    rsync -t, touch -r) resumed every cell ("resuming: 2 of 2 cells") and showed the old model's
    perplexity."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(content, "RACY_SECONDS", 0.0)
    model = _copy(tiny_llama_dir, tmp_path)
    out = tmp_path / "out"
    first, _ = _run(model, out)
    assert first.done == 2 and first.resumed == 0
    weights = model / "model.safetensors"
    stat = weights.stat()
    replacement = other_tiny_llama_dir / "model.safetensors"
    assert replacement.stat().st_size == stat.st_size and replacement.read_bytes() != weights.read_bytes()
    shutil.copyfile(replacement, weights)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the old time kept
    second, _ = _run(model, out)
    assert second.resumed == 0 and second.done == 2
    assert second.summary["perplexity"] != first.summary["perplexity"]
    again, _ = _run(model, out)  # unchanged since: resumed (the new weights hashed once, then cached)
    assert again.done == 0 and again.resumed == 2


def _seal(path: Path, change) -> None:
    record = json.loads(path.read_text())
    change(record)
    record["checksum"] = checksum(record)
    path.write_text(json.dumps(record))


@pytest.mark.slow
def test_cells_from_another_transformers_are_refused_or_kept_when_allowed(
    tiny_llama_dir, tmp_path, monkeypatch
):
    """A transformers (or torch) upgrade can change a model's numerics: a record keeps the versions,
    and a resume over other ones is refused in one line naming them, or kept with --allow-changed."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    _run(tiny_llama_dir, out)
    records = sorted((out / "cells").glob("*.json"))
    versions = json.loads(records[0].read_text())["versions"]
    assert versions["transformers"] == transformers.__version__ and "torch" in versions and "gguf" in versions
    _seal(records[0], lambda r: r["versions"].update(transformers="4.0.0"))
    with pytest.raises(
        PosencError, match=r"1 finished cell\(s\) .* transformers 4.0.0 \(this installation: "
    ):
        _run(tiny_llama_dir, out)
    result, logged = _run(tiny_llama_dir, out, allow_changed=True)
    assert result.resumed == 2 and result.done == 0
    assert any("keeping 1 cell(s) computed with other versions (--allow-changed)" in line for line in logged)
    refused = CliRunner().invoke(main, [
        "extend", "--model", str(tiny_llama_dir), "--device", "cpu", "--lengths", "32,64", "--passkey-lengths", "",
        "--documents", "2", "--scalings", "none", "--chunk", "64", "--workers", "1", "--out", str(out)])  # fmt: skip
    errors = [line for line in refused.output.splitlines() if line.startswith("posenc: error:")]
    assert refused.exit_code == 2 and len(errors) == 1 and "pass --allow-changed" in errors[0], refused.output
    assert "Traceback" not in refused.output


# --- records that cannot brick OUT ---------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage",
    [{}, {"nll": "abc"}, {"nll": []}, {"nll": [1.0, "x"]}, "nested"],
    ids=["empty", "string", "empty-list", "not-numbers", "nesting-bomb"],
)
def test_a_cell_whose_result_is_malformed_is_set_aside_and_computed_again(tiny_llama_dir, tmp_path, monkeypatch,
                                                                           damage):  # fmt: skip
    """Found: a record whose checksum checks but whose result is {} (nll "abc", nll []) crashed resume
    and --summarize on every rerun (KeyError: 'nll'); a nesting bomb in cells/ was a RecursionError."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "out"
    first, _ = _run(tiny_llama_dir, out)
    record = sorted((out / "cells").glob("*.json"))[0]
    if damage == "nested":
        record.write_text("[" * 200_000 + "]" * 200_000)
    else:
        _seal(record, lambda r: r.update(result=damage))
    summarized, logged = _run(tiny_llama_dir, out, summarize_only=True)
    assert [line for line in logged if record.stem in line and "corrupt" in line]
    assert record.with_name(record.name + ".corrupt").exists() and not record.exists()
    again, _ = _run(tiny_llama_dir, out)
    assert again.done == 1 and again.resumed == 1
    assert again.summary["perplexity"] == first.summary["perplexity"]


# --- invocations sharing OUT ----------------------------------------------------------------------


def _cell(run_id: str = "abc"):
    from posenc.extend.plan import ExtendCell

    return ExtendCell(run_id, "text", "null", 0, (1, 2, 3), (), "m", False, "fp32", 64, "cpu", 1, "cell", 1)


def test_a_cell_claimed_by_a_live_process_is_not_claimed_until_that_process_ends(tmp_path):
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        theirs = cell_store.Store(tmp_path)
        theirs._me = {
            "host": theirs._me["host"],
            "pid": other.pid,
            "start": cell_store._process_start(other.pid),
        }
        assert theirs.claim("abc")
        mine = cell_store.Store(tmp_path)
        assert not mine.claim("abc") and mine.claimant("abc")["pid"] == other.pid
    finally:
        other.kill()
        other.wait()
    assert mine.claim("abc") and mine.claimant("abc") is None  # taken over: its process has ended
    mine.release("abc")
    assert not (tmp_path / "cells" / "abc.claim").exists()


def test_a_claim_of_a_reused_pid_is_stale(tmp_path):
    """A pid the system gave to a later process: the start time in the claim tells them apart."""
    (tmp_path / "cells").mkdir()
    me = cell_store.Store(tmp_path)._me
    claim = {"host": me["host"], "pid": os.getppid(), "start": "1", "since": time.time()}
    (tmp_path / "cells" / "abc.claim").write_text(json.dumps(claim))
    assert cell_store.Store(tmp_path).claim("abc")


def test_run_claimed_runs_what_it_can_then_waits_for_the_others_records(tmp_path, monkeypatch):
    monkeypatch.setattr(cell_store, "POLL_SECONDS", 0.05)
    store = cell_store.Store(tmp_path)
    free, busy = _cell("free"), _cell("busy")
    other = cell_store.Store(tmp_path)
    other._me = {**other._me, "pid": os.getppid(), "start": cell_store._process_start(os.getppid())}
    assert other.claim("busy")
    ran: list[str] = []
    logged: list[str] = []
    results: dict = {}

    def run_cells(cells):  # what extend's _run_cells does: compute, write each record, keep its result
        ran.extend(c.run_id for c in cells)
        for c in cells:
            store.write(c, {}, {"nll": [1.0, 2.0]})
            results[c.run_id] = {"nll": [1.0, 2.0]}
        if "free" in ran and not (tmp_path / "cells" / "busy.json").exists():
            other.write(busy, {}, {"nll": [3.0, 4.0]})  # the other invocation finishes its cell
        return []

    failed, done, shared = store.run_claimed([free, busy], results, run_cells, logged.append)
    assert ran == ["free"] and (failed, done, shared) == ([], 1, 1)
    assert results == {"free": {"nll": [1.0, 2.0]}, "busy": {"nll": [3.0, 4.0]}}
    assert "1 cell(s) are being computed by another posenc extend" in logged[0]
    assert not list((tmp_path / "cells").glob("*.claim"))


@pytest.mark.slow
def test_each_invocation_keeps_its_own_files_and_the_top_is_the_last_to_finish(tiny_llama_dir, tmp_path,
                                                                                monkeypatch):  # fmt: skip
    """Found: two runs on one -o overwrote each other's summary.json/.md, protocol.toml and run.json."""
    monkeypatch.setenv("POSENC_CACHE_DIR", str(tmp_path / "cache"))
    from posenc import extend

    out = tmp_path / "out"
    one = extend.run(_tiny_protocol(tiny_llama_dir), out=out, show_progress=False, log=lambda m: None)
    two = extend.run(_tiny_protocol(tiny_llama_dir, scalings=("none", "linear")), out=out, show_progress=False,
                     log=lambda m: None)  # fmt: skip
    assert two.resumed == 2 and two.done == 2  # the shared cells are not computed twice
    first, second = Path(one.files["invocation"]), Path(two.files["invocation"])
    assert first != second and first.parent == second.parent == out / "invocations"
    for directory, result in ((first, one), (second, two)):
        assert protocols.load(str(directory / "protocol.toml")).scalings == result.protocol.scalings
        assert (
            json.loads((directory / "summary.json").read_text())["perplexity"] == result.summary["perplexity"]
        )
        assert json.loads((directory / "run.json").read_text())["cells_done"] == 2
    top = json.loads((out / "run.json").read_text())
    assert top["invocation"] == "invocations/" + second.name
    assert (out / "protocol.toml").read_text() == (second / "protocol.toml").read_text()
    assert (out / "summary.json").read_text() == (second / "summary.json").read_text()


def test_the_summary_of_a_directory_nobody_else_writes_still_reads_the_shipped_records():
    """The shipped extend results keep their format (a 16-hex fingerprint of before): they render."""
    from posenc.extend.summary_text import caption, markdown

    root = Path(__file__).resolve().parents[3] / "benchmarks" / "records" / "extend"
    shipped = sorted(root.glob("*/summary.json"))
    assert "more" in {path.parent.name for path in shipped}  # the first release's run, in its layout
    for path in shipped:
        summary = json.loads(path.read_text())
        assert markdown(summary) and caption(summary)
