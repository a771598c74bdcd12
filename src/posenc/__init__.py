"""posenc: every positional encoding for Transformers behind one interface.

Quick start::

    import posenc
    enc = posenc.build("sinusoidal", dim=512)
    x = enc.embed(token_embeddings)          # (b, n, d) -> (b, n, d)

Your own encoding: ``posenc.register("mine", MyEncoding)``, an import spec
``posenc.build("mypkg.pe:MyEncoding", ...)`` wherever a name is taken, or an entry point in
the group ``posenc.encodings``; ``posenc.testing.check_encoding`` checks it against the
contract every built-in passes. Your own RoPE context-extension scaling:
``posenc.register_scaling("mine", posenc.RopeScaling(...))`` (or an entry point in the group
``posenc.rope_scalings``), then ``"mine"`` is a ``rope_type`` wherever a scaling is taken, ``posenc
compare --scalings`` and ``posenc extend --scalings`` included.

Module paths of the previous release (``posenc.rotary``, ``posenc.model``, ...) still import, with
a DeprecationWarning naming the new one: :data:`MOVED` is the table.
"""

from types import ModuleType

from posenc import hf, presets, schedules
from posenc.core import moved as _moved
from posenc.core.errors import PosencError, PosencTypeError
from posenc.encoding.base import KINDS, PositionalEncoding
from posenc.encoding.rotary.scaling import RopeScaling, register_scaling, unregister_scaling
from posenc.registry import (
    ENCODINGS,
    build,
    build_for_model,
    encoding_spec,
    encodings,
    get_encoding_class,
    list_encodings,
    register_encoding,
    unregister_encoding,
)

register = register_encoding

#: Module paths of the previous release -> the module that holds their contents now. ``import
#: posenc.rotary``, ``from posenc.rotary import RoPE`` and ``posenc.rotary`` still work until the
#: next release, with a DeprecationWarning (:mod:`posenc.core.moved`); so do their submodules.
MOVED: dict[str, str] = {
    # the leaves: posenc.core
    "posenc.errors": "posenc.core.errors",
    "posenc.checks": "posenc.core.checks",
    "posenc.config": "posenc.core.fields",
    "posenc.positions": "posenc.core.positions",
    "posenc.axes": "posenc.core.axes",
    "posenc.tables": "posenc.core.sincos",
    "posenc.plugins": "posenc.core.plugins",
    "posenc.datafiles": "posenc.core.datafiles",
    "posenc.trust": "posenc.core.trust",
    "posenc.code_hash": "posenc.core.code_hash",
    # the fast paths: posenc.kernels
    "posenc.rotation": "posenc.kernels.rotation",
    "posenc.kernels.rope": "posenc.kernels.fused_rope",
    # the encodings, a package per kind: posenc.encoding
    "posenc.absolute": "posenc.encoding.absolute.sequence",
    "posenc.hierarchical": "posenc.encoding.absolute.hierarchical",
    "posenc.multiaxis": "posenc.encoding.absolute.axial",
    "posenc.rotary": "posenc.encoding.rotary",
    "posenc.multiaxis_rotary": "posenc.encoding.rotary.rope_axial",
    "posenc.rope_scaling": "posenc.encoding.rotary.scaling",
    "posenc.rope_formulas": "posenc.encoding.rotary.formulas",
    "posenc.bias": "posenc.encoding.bias",
    "posenc.multiaxis_bias": "posenc.encoding.bias.alibi_2d",
    "posenc.relative": "posenc.encoding.relative",
    "posenc.contextual": "posenc.encoding.contextual",
    # the model: posenc.nn
    "posenc.attention": "posenc.nn.attention",
    "posenc.kv_cache": "posenc.nn.kv_cache",
    "posenc.model": "posenc.nn.transformer",
    # modules renamed so that no two share a name
    "posenc.analysis.demonstrations.attention": "posenc.analysis.demonstrations.about_attention",
    "posenc.analysis.demonstrations.tables": "posenc.analysis.demonstrations.about_tables",
    "posenc.analysis.demonstrations.base": "posenc.analysis.demonstrations.demonstration",
    "posenc.analysis.summary": "posenc.analysis.property_summary",
    "posenc.extend.store": "posenc.extend.cell_store",
    "posenc.extend.text": "posenc.extend.documents",
    "posenc.extend.work": "posenc.extend.cell_work",
    "posenc.hf.attention": "posenc.hf.attention_function",
    "posenc.hf.checks": "posenc.hf.parity",
    "posenc.records.scalings": "posenc.records.benchmark_scalings",
    "posenc.results.figures": "posenc.results.result_figures",
    "posenc.tasks.grid": "posenc.tasks.grid_task",
    "posenc.tasks.registry": "posenc.tasks.task_registry",
    "posenc.viz.grid": "posenc.viz.patch_grid",
    "posenc.testing.report": "posenc.testing.contract_report",
    "posenc.cli.notes": "posenc.cli.notes_command",
    "posenc.cli.presets": "posenc.cli.presets_command",
    "posenc.cli.rope": "posenc.cli.rope_command",
    "posenc.cli.trust": "posenc.cli.trust_option",
    # the golden vectors: posenc.conform
    "posenc.conform_hf": "posenc.conform.hf_families",
    "posenc.conform_mrope": "posenc.conform.mrope_vectors",
    # the NumPy references: one module per kind's home in posenc.encoding
    "posenc.reference.hierarchical": "posenc.reference.absolute",
    "posenc.reference.rope_scaling": "posenc.reference.rotary",
    "posenc.reference.multiaxis": "posenc.reference.rotary",
}

#: Names that left their module or were renamed: ``old.module.Name`` -> ``new.module.Name``,
#: read through the old module path (with a DeprecationWarning).
MOVED_NAMES: dict[str, str] = {
    "posenc.absolute.NoPE": "posenc.encoding.none.NoPE",
    "posenc.absolute.NoPEConfig": "posenc.encoding.none.NoPEConfig",
    "posenc.absolute.ENCODINGS": "posenc.encoding.absolute.sequence.SEQUENCE_MEMBERS",
    "posenc.multiaxis.ENCODINGS": "posenc.encoding.absolute.axial.AXIAL_MEMBERS",
    "posenc.multiaxis_rotary.ENCODINGS": "posenc.encoding.rotary.rope_axial.AXIAL_ROTARY_MEMBERS",
    "posenc.multiaxis_bias.ENCODINGS": "posenc.encoding.bias.alibi_2d.ALIBI_2D_MEMBERS",
    "posenc.records.scalings.Scaling": "posenc.records.benchmark_scalings.BenchmarkScaling",
    "posenc.reference.multiaxis.sincos_1d": "posenc.reference.absolute.sincos_1d",
    "posenc.reference.multiaxis.sincos_axial": "posenc.reference.absolute.sincos_axial",
    "posenc.reference.multiaxis.learned_axial": "posenc.reference.absolute.learned_axial",
    "posenc.reference.multiaxis.interpolate_table": "posenc.reference.absolute.interpolate_table",
    "posenc.reference.multiaxis.alibi_2d": "posenc.reference.bias.alibi_2d",
}

_moved.install(MOVED, MOVED_NAMES)


def __getattr__(name: str) -> ModuleType:
    """``posenc.rotary`` and the other old module paths of :data:`MOVED`, read as attributes."""
    return _moved.resolve(__name__, name, MOVED)


__version__ = "0.1.0"

__all__ = [
    "ENCODINGS",
    "KINDS",
    "MOVED",
    "MOVED_NAMES",
    "PosencError",
    "PosencTypeError",
    "PositionalEncoding",
    "RopeScaling",
    "__version__",
    "build",
    "build_for_model",
    "encoding_spec",
    "encodings",
    "get_encoding_class",
    "hf",
    "list_encodings",
    "presets",
    "register",
    "register_encoding",
    "register_scaling",
    "schedules",
    "unregister_encoding",
    "unregister_scaling",
]
