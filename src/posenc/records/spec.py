"""Run specs: one independent, picklable unit of benchmark work.

A :class:`RunSpec` says everything a worker needs to train and evaluate one
model (encoding variant x task x seed); its :attr:`RunSpec.run_id` is a hash of
that content, so a finished record is found again by recomputing the spec.
Execution details (threads) are not part of the identity.

:data:`BENCHMARK_VERSION` names the semantics of a run (what "trained" and "evaluated"
mean). It is part of the identity and of every record, so a record written under other
semantics is never resumed or summarised as a current result (see
:mod:`posenc.records.store`). Bump it whenever a change alters what a record's numbers mean.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import InitVar, dataclass, field
from typing import Any

from posenc import schedules
from posenc.core.datafiles import MISSING, Where, typed
from posenc.core.errors import PosencError
from posenc.encoding.base import PaperSetting
from posenc.nn.transformer import paper_setting as model_setting
from posenc.records import benchmark_scalings as scalings
from posenc.registry import HoldsEncodingClass
from posenc.tasks import text

#: Version 3: as version 2, and within a seed every encoding starts from the same values of every
#: weight they share (common random numbers: posenc.compare.work.share_initial_weights), and each
#: task record keeps every example's answer log-likelihood. Version 2: training stops at
#: in-distribution convergence (held-out checks, a step cap), the learning rate is chosen per
#: encoding by in-distribution validation, several seeds, PI/YaRN fine-tuned at the target length.
#: Version 1 (no ``benchmark`` field): a fixed number of steps at one learning rate, scalings applied
#: without fine-tuning.
BENCHMARK_VERSION = 3
#: What each version means (for the message that refuses an earlier one's records, and the line
#: above a table published from them).
BENCHMARK_HISTORY = {
    1: "fixed step counts at one learning rate, no convergence check, scalings without fine-tuning",
    2: "training to in-distribution convergence, learning rate tuned per encoding, fine-tuned PI/YaRN",
    3: "as version 2, with the weights the encodings share starting equal within a seed, answer "
    "log-likelihoods kept, and quick's LM trained a fixed 1000 steps",
}
#: Payload key of a run's trained weights (bytes); the store writes them next to the record.
WEIGHTS_KEY = "weights_bytes"


@dataclass(frozen=True)
class ModelSpec:
    d_model: int = 64  # width
    num_heads: int = 4
    num_layers: int = 3
    ffn_dim: int = 256  # GELU MLP hidden size
    combine: str = "add"  # additive encodings: "add" | "concat" (posenc.nn.transformer.TransformerConfig)
    inject: str = "input"  # additive encodings: "input" | "every_layer"
    num_kv_heads: int | None = None  # key/value heads (grouped-query attention); None = num_heads
    # token embeddings (N(0, 0.02), GPT-2 style) times sqrt(d_model), as Vaswani et al. 3.4. None:
    # each encoding as its paper sets it up (its class's paper_setting; a run spec holds the
    # resolved value); True / False: one setting for every encoding
    scale_embeddings: bool | None = None


@dataclass(frozen=True)
class TrainSpec:
    steps: int = 1500  # step cap: training stops earlier once it has converged
    batch_size: int = 64
    lr: float = 1e-3  # AdamW peak learning rate
    betas: tuple[float, float] = (0.9, 0.98)
    weight_decay: float = 0.01  # on matrices only (not norms, biases, embeddings)
    warmup_steps: int = 100  # linear warm-up, then cosine down to min_lr_ratio * lr
    min_lr_ratio: float = 0.1
    clip_norm: float = 1.0
    min_len: int = 1  # task: n ~ U{min_len .. max_len}
    max_len: int = 16  # task: longest training n; lm: L_train (bytes per window)
    position_warmup_steps: int = 0  # additive signal scaled by min(1, step / this); 0 = off
    # Convergence: every ``check_every`` steps the model is scored on a held-out set drawn
    # from the training distribution (``valid_samples`` examples, or LM windows of L_train
    # bytes); never on an evaluation length.
    check_every: int = 50
    valid_samples: int = 256
    converge_at: float = 0.99  # tasks: held-out exact match at which training stops
    # LM: converged once the best held-out loss of the last ``plateau_checks`` checks is less
    # than ``plateau`` (relative) below the best before them, at a check from step
    # ``plateau_after`` on (earlier flat stretches, e.g. before the model starts to use
    # context, do not count).
    plateau: float = 0.01
    plateau_checks: int = 3
    plateau_after: int = 0


#: Fields added after records existed, with the value that means "as before": left
#: out of the identity at that value, so older records keep their run ids.
_NEW_DEFAULTS: dict[str, dict[str, Any]] = {
    "": {"benchmark": 1, "finetune": 0, "precision": "fp32"},
    "model": {"combine": "add", "inject": "input", "num_kv_heads": None, "scale_embeddings": False},
    "train": {"position_warmup_steps": 0, "plateau_after": 0},
    "eval": {"scales": (), "free_running": False, "lm_files": 0},
}

#: How perplexity at L_valid is computed (``EvalSpec.lm_protocol``).
LM_PROTOCOLS = {
    "nonoverlapping": "non-overlapping windows of L_valid bytes (Press et al. 2022, ALiBi)",
    "sliding": "sliding windows of L_valid bytes, each scoring its last stride bytes",
}


@dataclass(frozen=True)
class EvalSpec:
    # Synthetic tasks.
    lengths: tuple[int, ...] = (8, 16, 20, 24, 32, 48, 64)  # evaluation n
    # Evaluation lengths as multiples of the trained sequence length in tokens (the longest row
    # a training example gives the model: BOS, x, SEP, y); for each, the longest n whose rows are
    # at most that long (posenc.compare.grid.lengths_at_scales), per task. () = ``lengths``.
    scales: tuple[float, ...] = ()
    samples: int = 256  # examples per length (the same for every encoding)
    # Also decode greedily, feeding the model its own outputs: free-running exact match and
    # correct-prefix length, next to the teacher-forced scores (records before it: False).
    free_running: bool = True
    # Language model (lengths in bytes), scored on the test split (posenc.tasks.text).
    lm_lengths: tuple[int, ...] = (64, 128, 192, 256, 384, 512, 1024, 2048)  # non-overlapping L_valid
    # Scored bytes in all: lm_bytes / lm_files from each of lm_files test files, rounded up to a
    # multiple of lcm(lm_lengths) (posenc.tasks.text.span_bytes). lm_files 0 (records before test
    # splits): the first lm_bytes of the validation text, which this version no longer evaluates.
    lm_bytes: int = 12288
    lm_files: int = 20
    lastk_contexts: tuple[float, ...] = (1.0, 1.25, 1.5, 2.0, 4.0, 8.0)  # x L_train
    lastk_k: int = 64
    lastk_windows: int = 32  # last-k windows per test file (records before test splits: in all)
    # How perplexity at L_valid is computed: "nonoverlapping" windows (the ALiBi paper's
    # protocol) or "sliding" windows of L_valid advancing by ``sliding_stride`` bytes,
    # each scoring only its last ``sliding_stride`` bytes (every byte sees >= L_valid -
    # stride bytes of context; costs L_valid / stride times more).
    lm_protocol: str = "nonoverlapping"
    sliding_stride: int = 16
    position_multiple: int = 8  # loss by position at this multiple of L_train
    batch_size: int = 64  # evaluation rows per forward pass (memory only; no effect on numbers)
    seed: int = 0  # seed of the evaluation sets (not the run seed: identical across runs)

    def test_span(self, l_train: int) -> int:
        """Bytes the LM scores per test file (:func:`posenc.tasks.text.span_bytes`) at L_train
        ``l_train``, after checking that such a span holds every window the evaluation reads from a
        file (PosencError naming the key otherwise)."""
        span = text.span_bytes(list(self.lm_lengths), self.lm_bytes, max(1, self.lm_files))
        contexts = [int(round(c * l_train)) for c in self.lastk_contexts]
        if self.lastk_k > min(contexts):
            raise PosencError(
                f"eval.lastk_k ({self.lastk_k}) must be <= the shortest last-k context ({min(contexts)} bytes)"
            )
        position = self.position_multiple * l_train
        in_pass = self.lm_protocol == "nonoverlapping" and position in self.lm_lengths
        text.check_span_layout(
            span,
            lastk_context=max(contexts),
            lastk_k=self.lastk_k,
            lastk_windows=self.lastk_windows,
            position_length=0 if in_pass else position,
        )
        return span


@dataclass(frozen=True)
class RunSpec(HoldsEncodingClass):
    """Everything one worker needs; pickles to other processes (or machines)."""

    task: str  # a task name or import spec (posenc.tasks.task_names()), or "lm"
    encoding: str  # an encoding name or import spec (posenc.encodings())
    seed: int
    variant: str = "default"  # "default" | "scaled" (length parameters scaled to training length)
    encoding_config: dict[str, Any] = field(default_factory=dict)  # overrides of the encoding's Config
    randomized_max_len: int | None = None  # Ruoss et al. 2023 positions from [0, L_max); None = off
    model: ModelSpec = ModelSpec()
    train: TrainSpec = TrainSpec()
    eval: EvalSpec = EvalSpec()
    # RoPE scalings evaluated on the trained model, e.g. "dynamic:4" (no training, as the
    # method is meant to be used) or "yarn:4" / "linear:4" (after ``finetune`` steps at
    # factor x L_train, as their papers do; see posenc.records.benchmark_scalings).
    scalings: tuple[str, ...] = ()
    finetune: int = 0  # fine-tuning steps for the scalings that need them (0: none)
    # a per-layer schedule (posenc.schedules.parse), e.g. "irope:2"; "" = `encoding` in every layer.
    # With a schedule, `encoding` is its first layer's and encoding_config maps names to overrides.
    schedule: str = ""
    benchmark: int = BENCHMARK_VERSION  # the semantics this run follows (see BENCHMARK_VERSION)
    # "fp32", or "bf16": every forward under autocast to bfloat16 (posenc.compare.device)
    precision: str = "fp32"
    profile: str = ""  # name of the profile that made it (provenance only, not identity)
    lr_source: str = ""  # how train.lr was chosen (provenance only, not identity)
    threads: int = 1  # torch intra-op threads (execution only, not identity)
    device: str = "cpu"  # where it computes: cpu, cuda, cuda:N, mps (execution only, not identity)
    # Names registered only in the process that made the grid, as (registry, name, import spec):
    # a worker registers them before it builds the run (execution only, not identity).
    imports: tuple[tuple[str, str, str], ...] = ()
    # The class of ``encoding`` where the maker has it (the grid resolves each name once): not data,
    # so in no record, run id or comparison; ``dataclasses.replace`` carries it while ``encoding`` stays.
    encoding_class: InitVar[Any] = None

    def __post_init__(self, encoding_class: Any) -> None:
        self._hold_class(encoding_class)
        if self.model.scale_embeddings is None:  # as the encoding's paper: resolved once, here
            # the spec holds the setting it trains with (its identity, label and record say it),
            # written as the spec is made (docs/architecture.md lists this write)
            scaled = self.paper_setting().scale_embeddings
            object.__setattr__(self, "model", dataclasses.replace(self.model, scale_embeddings=scaled))

    def paper_setting(self) -> PaperSetting:
        """How the paper of this run's encoding (or every encoding of its schedule) sets up the model."""
        if self.schedule:
            schedule = schedules.parse(self.schedule, self.model.num_layers)
            return model_setting(schedule, dict(self.encoding_config))
        return self.resolved_class().paper_setting_for(dict(self.encoding_config))

    @property
    def label(self) -> str:
        """Human name of the encoding variant: ``rope``, ``t5@scaled``, ``rope+rand``, ``irope:2``,
        ``sinusoidal[concat]``, ``sinusoidal[every_layer]``, ``sinusoidal[pe-warmup:200]``,
        ``learned[scaled-emb]`` / ``sinusoidal[unscaled-emb]`` (token embeddings set up otherwise
        than the encoding's paper does), ``rope[kv:1]`` (one key/value head), ``rope[bf16]``."""
        base = self.schedule or self.encoding
        name = base if self.variant == "default" else f"{base}@{self.variant}"
        tags = self.architecture_tags()
        name += f"[{','.join(tags)}]" if tags else ""
        return name + ("+rand" if self.randomized_max_len else "")

    def architecture_tags(self) -> list[str]:
        """How this run adds position, where it differs from the default (``[]`` = default)."""
        tags = []
        if self.model.combine != "add":
            tags.append(self.model.combine)
        if self.model.inject != "input":
            tags.append(self.model.inject)
        scaled = self.model.scale_embeddings
        if scaled is not None and scaled != self.paper_setting().scale_embeddings:
            tags.append("scaled-emb" if scaled else "unscaled-emb")
        if self.train.position_warmup_steps:
            tags.append(f"pe-warmup:{self.train.position_warmup_steps}")
        if self.model.num_kv_heads is not None and self.model.num_kv_heads != self.model.num_heads:
            tags.append(f"kv:{self.model.num_kv_heads}")
        if self.precision != "fp32":
            tags.append(self.precision)
        return tags

    def identity(self) -> dict[str, Any]:
        """The content that determines the numbers (everything but provenance, threads and device)."""
        data = dataclasses.asdict(self)
        data.pop("profile")
        data.pop("lr_source")
        data.pop("threads")
        data.pop("device")
        data.pop("imports")
        if not data["schedule"]:  # added after records existed: "" keeps older run ids
            del data["schedule"]
        for part, defaults in _NEW_DEFAULTS.items():
            node = data[part] if part else data
            for key, value in defaults.items():
                if node[key] == value:
                    del node[key]
        return data

    @functools.cached_property
    def run_id(self) -> str:
        """The first 16 hex digits of the SHA-256 of :meth:`identity` as sorted JSON; a cache, worked
        out once per spec (a frozen spec keeps its content), since progress reports ask for it on
        every training step."""
        text = json.dumps(self.identity(), sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=list))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """The spec of a record (``to_dict``'s output). A record is data, whoever wrote it: every field
        is type-checked first (a PosencError names the key) and nothing is imported, not even the
        encoding's class (the record holds ``model.scale_embeddings`` resolved, never None)."""
        if not isinstance(data, dict):
            raise PosencError(f"spec must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        where = Where("spec")
        for part in ("model", "train", "eval"):
            if not isinstance(data.get(part), dict):
                raise where.error(part, data.get(part, MISSING), "must be a JSON object")
        # records from before the field existed trained unscaled token embeddings
        model_data = data["model"] = {"scale_embeddings": False, **data["model"]}
        if model_data["scale_embeddings"] is None:  # resolving it would import the encoding's class
            raise where.error("model.scale_embeddings", None, "must be true or false in a run's spec")
        data.setdefault("benchmark", 1)  # records from before the field existed
        typed(cls, data, where)  # types only: the values below stay as written (they make the run id)
        for entry in data.get("imports", ()):
            if entry[0] not in ("encoding", "task"):
                raise where.error("imports", entry, "each entry must be [registry, name, import spec] with "
                                  'registry "encoding" or "task"')  # fmt: skip
        model = ModelSpec(**data.pop("model"))
        train = TrainSpec(**_train(data))
        # records from before test splits and free-running decoding: neither (see EvalSpec)
        eval_fields: dict[str, Any] = {"free_running": False, "lm_files": 0} | {
            k: tuple(v) if isinstance(v, list) else v for k, v in data.pop("eval").items()
        }
        ev = EvalSpec(**eval_fields)
        data["scalings"] = tuple(data.get("scalings", ()))
        data["imports"] = tuple(tuple(item) for item in data.get("imports", ()))
        return cls(model=model, train=train, eval=ev, **data)

    def work_units(self) -> int:
        """Rough cost in training-step equivalents (for one progress bar over a grid): the
        step cap (a run that converges earlier tops up its share when it finishes)."""
        tuned = sum(1 for name in self.scalings if scalings.parse(name).needs_finetune)
        return self.train.steps + self.finetune * tuned + self.eval_units()

    def eval_units(self) -> int:
        if self.task == "lm":
            return max(1, len(self.eval.lm_lengths) * (1 + len(self.scalings)))
        return max(1, len(self.eval.lengths) * (1 + len(self.scalings)))


def _train(data: dict[str, Any]) -> dict[str, Any]:
    train = dict(data.pop("train"))
    train["betas"] = tuple(train["betas"])
    return train
