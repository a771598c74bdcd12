"""Numeric checks of what the seeds claim, for every registered encoding.

Functions return data (NumPy arrays, dataclasses); figures live in :mod:`posenc.viz`.
"""

from posenc.analysis.probes import (
    Sensitivity,
    attention_maps,
    equivariance_gap,
    permutation_equivariance_gap,
    position_sensitivity,
    small_model,
)
from posenc.analysis.properties import (
    IntegerIndexGrowth,
    LinearMap,
    SeedSimilarityCheck,
    TranslationResidual,
    Uniqueness,
    ValueRange,
    cosine_similarity,
    distance_decay,
    fit_shift_map,
    integer_index_growth,
    linear_relative_map,
    rope_decay_bound,
    seed_similarity_check,
    similarity_matrix,
    sinusoidal_shift_matrix,
    sinusoidal_table,
    translation_residual,
    uniqueness,
    value_range,
)
from posenc.analysis.signals import make, position_kernel, position_signal
from posenc.analysis.summary import PROPERTY_COLUMNS, EncodingProperties, encoding_properties

__all__ = [
    "PROPERTY_COLUMNS",
    "EncodingProperties",
    "IntegerIndexGrowth",
    "LinearMap",
    "SeedSimilarityCheck",
    "Sensitivity",
    "TranslationResidual",
    "Uniqueness",
    "ValueRange",
    "attention_maps",
    "cosine_similarity",
    "distance_decay",
    "encoding_properties",
    "equivariance_gap",
    "fit_shift_map",
    "integer_index_growth",
    "linear_relative_map",
    "make",
    "permutation_equivariance_gap",
    "position_kernel",
    "position_sensitivity",
    "position_signal",
    "rope_decay_bound",
    "seed_similarity_check",
    "similarity_matrix",
    "sinusoidal_shift_matrix",
    "sinusoidal_table",
    "small_model",
    "translation_residual",
    "uniqueness",
    "value_range",
]
