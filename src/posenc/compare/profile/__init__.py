"""The profiles of ``posenc compare``: each a TOML file, loaded into a typed :class:`Profile`.

| profile | budget | grid |
|---|---|---|
| ``smoke`` | seconds | 2 encodings, copy + LM, tiny model, 3 seeds; exercises every code path (tests) |
| ``quick`` | about 11 min on 2 idle cores, figures and report included (634 s measured: the README) | the five encodings the NoPE paper ranks (the ALiBi paper's four among them) + RoPE's context extensions, copy + passkey + LM, 3 seeds |
| ``standard`` | <= 60 min on 2 cores (measured: docs/benchmark.md) | every registered encoding + randomized sinusoidal and RoPE, copy + passkey + LM, 3 seeds |
| ``notes`` | about 7 min on 2 idle cores (measured: docs/benchmark.md) | sinusoidal + learned with the architecture variants, scaled_sinusoidal, integer positions, RoPE, T5, ALiBi; copy, 3 seeds |
| ``full`` | many hours (not timed) | every encoding and task, 5 seeds, default *and* scaled variants, randomized variants, architecture variants |

The shipped files are ``posenc/compare/profiles/NAME.toml``; ``quick.toml`` sets every key
with a comment, so it is the one to copy. A profile file's keys are the fields of
:class:`Profile`, and its tables ``[model]``, ``[task_train]``, ``[lm_train]`` and ``[eval]``
the fields of :class:`~posenc.records.spec.ModelSpec`, :class:`~posenc.records.spec.TrainSpec`
and :class:`~posenc.records.spec.EvalSpec`: the same names as in every run record's
``spec``. A key left out takes its default. ``extends = "quick"`` starts from another
profile (a shipped name, or a path relative to the file): tables merge key by key, any
other value is replaced. ``"all"`` stands for every registered encoding (``encodings``),
every additive one (``variant_encodings``) or every encoding of the grid (``randomized``).
``[encoding_config.NAME]`` overrides parameters of encoding ``NAME`` in every run.
``model.num_kv_heads`` takes a divisor of ``model.num_heads`` or the name of a model preset,
whose grouping it copies (``"llama-3.1"``: 4 query heads per key/value head, so 4 heads -> 1).

The options of ``posenc compare`` that set a key (``--encodings``, ``--seeds``,
``--kv-heads``, ...) are a :class:`ProfileOptions`, applied on top of the file and ``--set``
by :func:`load_profile` and checked with them.

Everything is checked here, once, when the file is read: an unknown key, a value of the
wrong type or out of its range (every float finite; counts and lengths at most
:data:`MAX_COUNT`), a name that is not an encoding or a task (with the closest one), keys
that contradict each other (a one-rate ``lr_grid`` and a different ``lr``) raise
:class:`~posenc.core.errors.PosencError` naming the file (or the ``--set`` item or option that
set the key), the key, the value and what is valid, before any run starts. What depends on
the machine (the model's memory against the device's, the LM's bytes against the corpus)
is checked by :func:`check_fits` before the first run. A loaded profile holds what its
checks resolved (:attr:`Profile.resolved`: each encoding's class, each scaling and variant
parsed), which the grid reads instead of resolving or parsing again.

A one-rate ``lr_grid`` trains every run at that rate: it is each training table's ``lr``
where the table sets none, and a table whose ``lr`` differs is refused.

Architecture variants (*how* position is added, for additive encodings only) are written
``key=value`` with ``+`` joining settings of one variant: ``combine=concat``,
``inject=every_layer``, ``position_warmup=200`` (the additive signal ramps from 0 to 1
over 200 steps), ``scale_embeddings=true`` (token embeddings times sqrt(d_model), Vaswani
et al. 3.4), ``inject=every_layer+position_warmup=200``.

The package, one job per module:

- :mod:`~posenc.compare.profile.definition`: :class:`Profile`, its constants and the ranges of its numbers;
- :mod:`~posenc.compare.profile.load`: reading a file (``extends``, ``--set``, options) and the shipped profiles;
- :mod:`~posenc.compare.profile.profile_checks`: what the types cannot say, checked once;
- :mod:`~posenc.compare.profile.question_checks`: the declared questions and the plan for deciding them;
- :mod:`~posenc.compare.profile.geometry`: lengths, memory and the machine fit;
- :mod:`~posenc.compare.profile.variants`: architecture variants;
- :mod:`~posenc.compare.profile.dump`: a profile as a file again (``--print-config``).

The ``--set`` parser is :func:`posenc.core.dotted_keys.parse_set` (``posenc extend`` reads its
protocols' ``--set`` with it too).
"""

from __future__ import annotations

from posenc.compare.profile.definition import (
    ALL,
    ARCHITECTURE,
    DEFAULT_RUN,
    ELEMENT_RANGES,
    FILE_KEYS,
    FRACTION,
    MAX_COUNT,
    MAX_FILE_BYTES,
    MAX_SEED,
    OWN_KEYS,
    POSITIVE,
    RANDOMIZED_MAX_LEN,
    RANGES,
    TRAIN_TABLES,
    Bounds,
    KeySources,
    Profile,
    Resolved,
    dotted,
)
from posenc.compare.profile.dump import LONG_ARRAY, dump_profile
from posenc.compare.profile.geometry import (
    FLOAT_BYTES,
    TRAINING_BYTES_PER_PARAMETER,
    check_fits,
    device_memory,
    eval_length,
    memory_needed,
    parameter_count,
    task_eval,
    train_length,
)
from posenc.compare.profile.load import (
    ALL_MEANS,
    OPTION_KEYS,
    OPTION_NEEDS,
    PROFILES,
    Option,
    ProfileOptions,
    ShippedProfiles,
    get_profile,
    load_profile,
    shipped_dir,
    shipped_names,
)
from posenc.compare.profile.profile_checks import checked
from posenc.compare.profile.variants import VARIANT_KEYS, parse_variant, parse_variants
from posenc.core.dotted_keys import SET_FORM, parse_set

__all__ = [
    "ALL",
    "ALL_MEANS",
    "ARCHITECTURE",
    "DEFAULT_RUN",
    "ELEMENT_RANGES",
    "FILE_KEYS",
    "FLOAT_BYTES",
    "FRACTION",
    "LONG_ARRAY",
    "MAX_COUNT",
    "MAX_FILE_BYTES",
    "MAX_SEED",
    "OPTION_KEYS",
    "OPTION_NEEDS",
    "OWN_KEYS",
    "POSITIVE",
    "PROFILES",
    "RANDOMIZED_MAX_LEN",
    "RANGES",
    "SET_FORM",
    "TRAINING_BYTES_PER_PARAMETER",
    "TRAIN_TABLES",
    "VARIANT_KEYS",
    "Bounds",
    "KeySources",
    "Option",
    "Profile",
    "ProfileOptions",
    "Resolved",
    "ShippedProfiles",
    "check_fits",
    "checked",
    "device_memory",
    "dotted",
    "dump_profile",
    "eval_length",
    "get_profile",
    "load_profile",
    "memory_needed",
    "parameter_count",
    "parse_set",
    "parse_variant",
    "parse_variants",
    "shipped_dir",
    "shipped_names",
    "task_eval",
    "train_length",
]
