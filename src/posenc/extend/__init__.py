"""``posenc extend``: how far a pretrained checkpoint reads under each RoPE scaling, without training.

One command puts every context-extension scaling side by side on one checkpoint
(:mod:`posenc.extend.scalings`: none, position interpolation, NTK-aware, dynamic NTK, YaRN,
dynamic YaRN, Llama 3, LongRoPE where the config carries its factors, and any scaling registered
with ``posenc.register_scaling`` or an entry point) x factors x evaluation
lengths from well inside the trained context to past it (the original context the config's RoPE
scaling states, as Phi-3's LongRoPE checkpoints do, else ``max_position_embeddings``:
:func:`posenc.extend.scalings.trained_context`), and measures

- loss by position and perplexity by length on real text (:mod:`posenc.extend.documents`), with
  intervals over documents;
- passkey retrieval at each length x depth (:mod:`posenc.extend.passkey`), greedy, scored exactly;
- what each scaling costs inside the trained context (perplexity relative to plain RoPE),

then writes a table and figures (:mod:`posenc.extend.summary`). The scalings are posenc's: the
checkpoint gets posenc's RoPE through :func:`posenc.hf.apply` and each scaling through
:meth:`posenc.hf.Applied.set_scaling`. The grid is a TOML protocol (:mod:`posenc.extend.protocol`;
``smollm2``, the default, runs on two CPU cores; ``yarn-llama2`` is the YaRN paper's evaluation
for a GPU); each finished cell is written at once (:mod:`posenc.extend.cell_store`) and a rerun
resumes. Before any cell runs, every input is checked: the checkpoint (a directory that is not
one, a model without RoPE, a family posenc has not verified), every scaling against the model's
family and rotary size, the device and precision, and whether the memory holds the longest pass.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, cast

import posenc.extend.checkpoint as checkpoints
import posenc.extend.documents as texts
import posenc.extend.passkey as pk
import posenc.extend.plan as plans
import posenc.extend.scalings as sc
import posenc.extend.summary as summaries
from posenc.compare.device import check_precision, describe, resolve_device
from posenc.compare.executor import make_executor, max_threads
from posenc.compare.ray_executor import require_ray
from posenc.compare.runner import GridProgress
from posenc.core.checks import check_int
from posenc.core.errors import PosencError
from posenc.encoding.rotary import scaling as rope_scaling
from posenc.extend.cell_store import Store, check_versions
from posenc.extend.cell_work import execute
from posenc.extend.protocol import Protocol, dump, load, shipped_names
from posenc.hf.config import config_dict
from posenc.hf.families import FAMILIES, family_of
from posenc.hf.model import own_rope
from posenc.records.benchmark_scalings import missing_keys
from posenc.records.files import atomic_write_text

__all__ = ["ExtendResult", "Protocol", "load", "run", "shipped_names"]

ROPE_KEYS = ("rope_theta", "rope_parameters", "rope_scaling", "rotary_dim", "rotary_pct", "rotary_emb_base",
             "partial_rotary_factor", "qk_rope_head_dim")  # fmt: skip


def _flops(value: float) -> str:
    return f"{value / 1e12:.1f} TFLOP" if value >= 1e11 else f"{value / 1e9:.1f} GFLOP"


@dataclass
class ExtendResult:
    protocol: Protocol
    out: Path
    model: str
    summary: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    done: int = 0
    resumed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    wall_seconds: float = 0.0
    flops: float = 0.0

    def notes(self) -> list[str]:
        lines = [
            f"cells: {self.done} done, {self.resumed} resumed, {len(self.failed)} failed; "
            f"{self.wall_seconds:.0f} s ({_flops(self.flops)} in the grid)"
        ]
        lines += [f"FAILED {label}: {error}" for label, error in self.failed]
        lines += [f"{kind}: {path}" for kind, path in self.files.items()]
        return lines


@dataclass
class Preflight:
    """What the checks before the grid found out about the checkpoint."""

    checkpoint: checkpoints.Checkpoint
    config: Any  # the transformers (text) config
    family: str
    context: int
    rotary_dim: int
    base: float
    longrope: dict[str, Any] | None
    shape: plans.Shape
    context_note: str = ""  # where the trained context comes from, when not max_position_embeddings


def preflight(protocol: Protocol, entries: list[sc.Entry], checkpoint: checkpoints.Checkpoint) -> Preflight:
    """Refuse, naming the option, a checkpoint without RoPE, a family posenc has not verified or
    that refuses new scalings, and a scaling the model's rotary size refuses."""
    import transformers

    config = _read_config(checkpoint)
    raw = checkpoint.config
    architectures = raw.get("architectures") or [f"model_type {raw.get('model_type')}"]
    _, family = family_of(config, str(architectures[0]), transformers.__version__)
    if family.rescaling:
        raise PosencError(
            f"--scalings: posenc.hf refuses new scalings in {family.label} models: {family.rescaling}"
        )
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    cfg = config_dict(text_config)
    if family.encoding != "rope":
        raise PosencError(f"--scalings: {family.label} models take no RoPE scaling in posenc.hf")
    layer_type = (family.scaled_layer_type or text_config.layer_types[0]) if family.layer_types else None
    rope = own_rope(family, cfg, layer_type)
    scaling = rope.get("scaling") if isinstance(rope.get("scaling"), dict) else None
    context, context_note = sc.trained_context(cfg, scaling, protocol.context)
    context = checkpoints.check_context(context, protocol.context, checkpoint.path)
    dim = int(rope.get("rotary_dim") or int(rope["head_dim"] * rope.get("partial_rotary_factor", 1.0)))
    own = sc.own_type(cfg)
    longrope = sc.own_keys(cfg, own) if own is not None else None  # what the config gives LongRoPE & co.
    _check_longrope_context(entries, context, longrope)
    _check_scalings(protocol, entries, context=context, dim=dim, base=float(rope["base"]), longrope=longrope,
                    own=own)  # fmt: skip
    shape = plans.Shape.of(text_config, _parameters(config, checkpoint))
    return Preflight(
        checkpoint,
        text_config,
        family.label,
        context,
        dim,
        float(rope["base"]),
        longrope,
        shape,
        context_note,
    )


def _check_longrope_context(entries: list[sc.Entry], context: int, longrope: dict[str, Any] | None) -> None:
    """LongRoPE's factors were searched for the config's original context and switch from the short
    ones to the long ones there: a trained context of another length would measure another model
    (so for every scaling whose keys the config gives)."""
    original = (longrope or {}).get(sc.ORIGINAL)
    own = [entry.name for entry in entries if entry.from_checkpoint]
    if original and original != context and own:
        raise PosencError(
            f"--context {context}: this checkpoint's {own[0]} keys were made for its "
            f"original_max_position_embeddings, {original} tokens (LongRoPE's factors switch from short to long "
            f"past it); leave --context out (or set it to {original}) to measure {own[0]}"
        )


def _read_config(checkpoint: checkpoints.Checkpoint) -> Any:
    """The checkpoint's transformers config; refused when its config names no RoPE or
    transformers cannot read it."""
    import transformers

    raw = checkpoint.config
    model_type = raw.get("model_type")
    text_raw: dict[str, Any] = raw["text_config"] if isinstance(raw.get("text_config"), dict) else raw
    if model_type not in FAMILIES and not any(key in text_raw for key in ROPE_KEYS):
        raise PosencError(
            f"--model {checkpoint.path!r}: model_type {model_type!r} has no rotary position embedding (RoPE) "
            "in its config; posenc extend measures RoPE scalings"
        )
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        return transformers.AutoConfig.from_pretrained(
            checkpoint.path, trust_remote_code=checkpoint.trust_remote_code
        )
    except Exception as exc:  # noqa: BLE001  (a config is data: whatever transformers' checks raise on it)
        said = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())[:300]
        raise PosencError(
            f"--model {checkpoint.path!r}: transformers cannot read its config ({said or type(exc).__name__})"
        ) from None
    finally:
        transformers.logging.set_verbosity(verbosity)


def _check_scalings(
    protocol: Protocol, entries: list[sc.Entry], *, context: int, dim: int, base: float,
    longrope: dict[str, Any] | None, own: str | None = None,
) -> None:  # fmt: skip
    """Every scaling at every length the protocol asks for, as the model's rotary size takes it
    (``longrope``: the keys of the config's own scaling, of type ``own``)."""
    for entry in entries:
        if entry.from_checkpoint and (longrope is None or own != entry.rope_type):
            keys = " and ".join(missing_keys(entry.rope_type))
            raise PosencError(
                f"--scalings {entry.key}: this checkpoint's config has no {entry.name} scaling to take its keys "
                f"({keys}) from: {entry.spec.cannot_build or 'values no benchmark can choose'}; posenc cannot "
                "make them up"
            )
        for length in sorted({*protocol.lengths, *protocol.passkey.lengths}):
            try:
                rope_scaling.Scaling.parse(entry.at(length, context, longrope), dim=dim).probe(base=base)
            except PosencError as exc:
                raise PosencError(f"--scalings {entry.key} at {length} tokens: {exc}") from None
            sc.check_equivalent(entry, length, context, dim=dim, base=base, longrope=longrope)


def _parameters(config: Any, checkpoint: checkpoints.Checkpoint) -> int:
    """The model's parameter count, from a model built on the meta device (no memory, no weights)."""
    import torch
    import transformers

    with torch.device("meta"):
        meta = transformers.AutoModelForCausalLM.from_config(
            config, trust_remote_code=checkpoint.trust_remote_code
        )
    return sum(p.numel() for p in meta.parameters())


def _tokenizers(checkpoint: checkpoints.Checkpoint) -> tuple[Any, Callable[[str], list[int]], list[int]]:
    import transformers

    tokenizer = checkpoints.load_tokenizer(checkpoint)
    verbosity = transformers.logging.get_verbosity()

    def plain(text: str) -> list[int]:
        transformers.logging.set_verbosity_error()  # "longer than the model's maximum" is the point
        try:
            return list(tokenizer(text, add_special_tokens=False)["input_ids"])
        finally:
            transformers.logging.set_verbosity(verbosity)

    prefix = list(tokenizer("", add_special_tokens=True)["input_ids"])
    return tokenizer, plain, prefix


def passkey_trunks(
    protocol: Protocol,
    entries: list[sc.Entry],
    context: int,
    longrope: dict[str, Any] | None,
    tokenize: Callable[[str, bool], list[int]],
) -> dict[tuple[str, int], tuple[tuple[int, ...], tuple[pk.Fork, ...]]]:
    """The passkey trunks of the grid, one per (tables, trial): every prompt whose scaling has the
    same tables at its length is a fork of the same trunk (:func:`posenc.extend.passkey.trunk`)."""
    groups: dict[str, list[tuple[int, float]]] = {}
    for entry in entries:
        for length in protocol.passkey.lengths:
            key = sc.tables_key(entry.at(length, context, longrope))
            for depth in protocol.passkey.depths:
                if (length, depth) not in groups.setdefault(key, []):
                    groups[key].append((length, depth))
    return {
        (key, trial): pk.trunk(tokenize, cells, seed=protocol.seed, trial=trial)
        for key, cells in groups.items()
        for trial in range(protocol.passkey.trials)
    }


def estimate(
    cells: list[plans.ExtendCell], *, device: str, workers: int, threads: int
) -> tuple[float | None, str]:
    """``(seconds, line)``: what running ``cells`` is expected to take, said as an estimate (on a
    CPU only: the rates are a CPU's; None elsewhere)."""
    if device != "cpu":
        return None, (
            f"no time estimate on {device} (posenc's rates are measured on a CPU); the progress bar's ETA times it"
        )
    seconds = plans.estimate_seconds(cells, workers=workers)
    rate = plans.CPU_RATE
    return seconds, (
        f"estimate: about {seconds / 60:.1f} minutes for {len(cells)} cell(s) on {workers} worker(s) x {threads} "
        f"thread(s), if this CPU is as fast as {rate.where} (dense layers {rate.dense:g}, attention "
        f"{rate.attention:g} GFLOP/s per thread, measured); an estimate, not a measurement: the progress bar's ETA "
        "times this machine"
    )


def default_threads(workers: int) -> int:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers))


@dataclass
class _Setup:
    """What :func:`run` knows before any cell runs: every input checked, the grid planned."""

    device: str
    entries: list[sc.Entry]
    store: Store
    checkpoint: checkpoints.Checkpoint
    facts: Preflight
    tokenizer: Any
    documents: Any
    plan: Any
    threads: int


def _setup(protocol: Protocol, out: str | Path, threads: int | None, trust_remote_code: bool, log) -> _Setup:
    """Check every input (device, precision, scalings, output directory, checkpoint, memory) and
    plan the grid: the documents and passkey prompts tokenized, the cells and their ids."""
    if protocol.needs and not (protocol.model and protocol.text):
        raise PosencError(f"the {protocol.name} protocol needs {protocol.needs}")
    device = resolve_device(protocol.device, "--device")
    check_precision(protocol.precision, device, "--precision")
    entries = protocol.entries  # parsed once, when the protocol was checked
    store = Store(Path(out))
    store.check_writable()
    checkpoint = checkpoints.resolve(protocol.model, trust_remote_code=trust_remote_code, log=log)
    facts = preflight(protocol, entries, checkpoint)
    margin = 512 if protocol.passkey.lengths else 0  # the question and the answer past a prompt
    plans.check_memory(facts.shape, length=protocol.longest + margin, chunk=protocol.chunk,
                       precision=protocol.precision, device=device, workers=protocol.workers)  # fmt: skip
    tokenizer, tokenize, prefix = _tokenizers(checkpoint)
    documents = texts.documents(
        protocol.text, tokenize, count=protocol.documents, length=max(protocol.lengths), prefix=prefix
    )

    def with_special(text: str, special: bool) -> list[int]:
        return prefix + tokenize(text) if special else tokenize(text)

    trunks = passkey_trunks(protocol, entries, facts.context, facts.longrope, with_special)
    threads = default_threads(protocol.workers) if threads is None else threads
    plan = plans.build(
        entries=entries, lengths=protocol.lengths, context=facts.context, documents=documents.documents,
        passkey=trunks, longrope=facts.longrope, shape=facts.shape, model=checkpoint.path,
        fingerprint=checkpoint.fingerprint, trust_remote_code=checkpoint.trust_remote_code,
        precision=protocol.precision, chunk=protocol.chunk, device=device, threads=threads,
    )  # fmt: skip
    return _Setup(device, entries, store, checkpoint, facts, tokenizer, documents, plan, threads)


def _pending(setup: _Setup, log, allow_changed: bool = False) -> tuple[dict[str, Any], int, list]:
    """``(results, resumed, todo)``: the records already in the output directory and the cells
    left, longest first (a corrupt record is set aside and its cell runs again; records computed
    with other versions of torch or transformers are refused unless ``allow_changed``)."""
    results, resumed, todo, found = {}, 0, [], {}
    for cell in setup.plan.cells:
        record, reason = setup.store.load(cell)
        if record is not None:
            results[cell.run_id] = record["result"]
            found[cell.run_id] = record
            resumed += 1
            continue
        if reason is not None:
            log(f"record {cell.run_id} is corrupt ({reason}); running its cell again")
            setup.store.quarantine(cell)
        todo.append(cell)
    check_versions(found, setup.store.root, allow_changed=allow_changed, log=log)
    if resumed:
        log(f"resuming: {resumed} of {len(setup.plan.cells)} cells already have valid records")
    todo.sort(key=lambda c: -c.units)  # longest first: the last cells to finish are short ones
    return results, resumed, todo


def _write_summary(
    protocol: Protocol, setup: _Setup, results: dict[str, Any], about: dict[str, Any], figures: bool
) -> tuple[dict[str, Any], dict[str, str]]:
    """The summary of the records there are, written as JSON, a markdown table and figures."""
    summary = summaries.summarize(
        setup.plan, results, entries=setup.entries, lengths=protocol.lengths, documents=protocol.documents,
        context=setup.facts.context, passkey_lengths=protocol.passkey.lengths, depths=protocol.passkey.depths,
        trials=protocol.passkey.trials, longrope=setup.facts.longrope,
    )  # fmt: skip
    summary["model"] = about
    summary["protocol"] = protocol.name
    summary["caption"] = summaries.caption(summary)
    root = setup.store.root
    files = {"summary": str(root / "summary.json"), "table": str(root / "summary.md")}
    atomic_write_text(root / "summary.json", json.dumps(summary, indent=1))
    atomic_write_text(root / "summary.md", summaries.markdown(summary) + "\n" + summary["caption"] + "\n")
    if figures:
        files.update(summaries.figures(summary, root / "figures"))
    return summary, files


def _write_run_info(
    protocol: Protocol, setup: _Setup, command: str, counts: dict[str, int], wall: float,
    estimated: float | None, *, measured: bool, summarize_only: bool, invocation: Path,
) -> dict[str, str]:  # fmt: skip
    """run.json (the invocation's own, then copied to the top of OUT): who measured the cells, where
    and how long it took (a rerun that only resumed them leaves it as it was)."""
    run_json = invocation / "run.json"
    info = {
        "protocol": protocol.name, "command": command, "model": setup.checkpoint.label,
        "device": describe(setup.device), "precision": protocol.precision, **counts,
        "wall_seconds": round(wall, 1), "cores": os.cpu_count(), "threads": setup.threads,
        "workers": protocol.workers, "tflop": round(setup.plan.flops() / 1e12, 1),
        "estimated_seconds": None if estimated is None else round(estimated),
        "finished": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }  # fmt: skip
    if not summarize_only and (measured or not run_json.exists()):
        atomic_write_text(run_json, json.dumps(info, indent=1))
    setup.store.publish(invocation)
    top = setup.store.root / "run.json"
    return {"run": str(top)} if top.exists() else {}


def _check_run_options(executor: str, address: str | None, threads: int | None) -> None:
    """How to run, checked before anything loads (each in one line naming the option)."""
    if executor not in ("local", "ray"):
        raise PosencError(f"executor must be 'local' or 'ray', got {executor!r}")
    if address and executor != "ray":
        raise PosencError("address needs executor 'ray' (--executor ray)")
    if threads is not None:
        check_int("threads (--threads)", threads, minimum=1, maximum=max_threads())
    if executor == "ray":
        require_ray()


def run(
    protocol: Protocol,
    *,
    out: str | Path = "posenc-extend",
    executor: str = "local",
    address: str | None = None,
    threads: int | None = None,
    trust_remote_code: bool = False,
    show_progress: bool = True,
    log: Callable[[str], None] = print,
    command: str = "",
    figures: bool = True,
    plan_only: bool = False,
    summarize_only: bool = False,
    allow_changed: bool = False,
) -> ExtendResult:
    """Run (or resume) ``protocol``'s grid into ``out``; returns the summary and what was written
    (``plan_only``: check everything and log the cells and their cost, run nothing;
    ``summarize_only``: write the table and figures from the records there are, run nothing;
    ``allow_changed``: keep finished cells computed with other torch / transformers versions)."""

    start = time.perf_counter()
    _check_run_options(executor, address, threads)
    setup = _setup(protocol, out, threads, trust_remote_code, log)
    checkpoint, facts, plan, store = setup.checkpoint, setup.facts, setup.plan, setup.store
    device, workers = setup.device, protocol.workers
    header = f"The effective protocol of: {command or 'posenc.extend.run(...)'}\nRun it again with: posenc extend --config FILE"
    invocation = store.invocation(protocol.name, dump(protocol), dump(protocol, header=header),
                                  write=not plan_only, keep=summarize_only)  # fmt: skip
    about = {"label": checkpoint.label, "fingerprint": checkpoint.fingerprint, "family": facts.family,
             "context": facts.context, "text": setup.documents.describe()}  # fmt: skip
    if facts.context_note:
        about["context_from"] = facts.context_note
    note = f" ({facts.context_note})" if facts.context_note else ""
    log(
        f"{checkpoint.label}: {facts.family}, trained context {facts.context} tokens{note}, "
        f"{facts.shape.parameters / 1e6:.0f}M parameters; {len(setup.entries)} scalings, {len(plan.cells)} cells, "
        f"{_flops(plan.flops())}"
    )
    if plan_only:
        for cell in plan.cells:
            log(f"  {cell.label}: {cell.units} GFLOP")
        log(estimate(plan.cells, device=device, workers=workers, threads=setup.threads)[1])
        return ExtendResult(protocol, store.root, checkpoint.label, {}, {}, 0, 0, [], time.perf_counter() - start,
                            plan.flops())  # fmt: skip
    results, resumed, todo = _pending(setup, log, allow_changed)
    if summarize_only:
        if todo:
            log(f"{len(todo)} of {len(plan.cells)} cells have no record yet; their numbers show as '-'")
        todo = []
    estimated: float | None = None
    if todo:
        estimated, line = estimate(todo, device=device, workers=workers, threads=setup.threads)
        log(line)
    failed, ran, shared = store.run_claimed(todo, results, lambda cells: _run_cells(
        cells, store, about, results, executor=executor, address=address, workers=workers,
        show_progress=show_progress, log=log), log)  # fmt: skip
    counts = {"cells_done": ran - len(failed), "cells_resumed": resumed + shared, "cells_failed": len(failed)}
    summary, files, wall = _write_outputs(protocol, setup, results, about, invocation, counts, start=start,
                                          estimated=estimated, command=command, figures=figures,
                                          summarize_only=summarize_only)  # fmt: skip
    del setup.tokenizer
    return ExtendResult(protocol, store.root, checkpoint.label, summary, files, ran - len(failed), resumed + shared,
                        failed, wall, plan.flops())  # fmt: skip


def _write_outputs(
    protocol: Protocol, setup: _Setup, results: dict[str, Any], about: dict[str, Any], invocation: Path,
    counts: dict[str, int], *, start: float, estimated: float | None, command: str, figures: bool,
    summarize_only: bool,
) -> tuple[dict[str, Any], dict[str, str], float]:  # fmt: skip
    """The summary, table, figures and run.json, written as one set at the top of OUT under its lock
    (and the invocation's own copies): ``(summary, files, wall seconds)``."""
    with setup.store.lock():
        summary, files = _write_summary(protocol, setup, results, about, figures)
        wall = time.perf_counter() - start
        files.update(_write_run_info(protocol, setup, command, counts, wall, estimated,
                                     measured=counts["cells_done"] + counts["cells_failed"] > 0,
                                     summarize_only=summarize_only, invocation=invocation))  # fmt: skip
    files["protocol"] = str(setup.store.root / "protocol.toml")
    files["invocation"] = str(invocation)
    return summary, files, wall


def _run_cells(todo, store, about, results, *, executor, address, workers, show_progress, log):
    """Run the cells left, writing each record the moment it lands; ``[(label, error)]`` of failures."""

    failed: list[tuple[str, str]] = []
    if not todo:
        return failed
    runner = make_executor(executor, workers=min(workers, len(todo)), address=address)
    with GridProgress(
        "posenc extend",
        todo,
        noun="cell",
        name=attrgetter("label"),
        units=attrgetter("units"),
        show_progress=show_progress,
        log=log,
    ) as progress:
        for cell, result in cast(Any, runner).map(execute, todo, progress.advance):
            if isinstance(result, BaseException):
                failed.append((cell.label, f"{type(result).__name__}: {result}"))
                log(f"cell {cell.label} failed: {type(result).__name__}: {result}")
            else:
                store.write(cell, about, result)
                results[cell.run_id] = result
            progress.finished(cell, result)
    return failed
