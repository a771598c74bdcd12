"""Numeric checks of what textbooks and tutorials claim, for every registered encoding.

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
    TranslationResidual,
    TutorialSimilarityCheck,
    Uniqueness,
    ValueRange,
    affine_relative_map,
    cosine_similarity,
    distance_decay,
    fit_shift_map,
    integer_index_growth,
    linear_relative_map,
    rope_decay_bound,
    similarity_matrix,
    sinusoidal_shift_matrix,
    sinusoidal_table,
    translation_residual,
    tutorial_similarity_check,
    uniqueness,
    value_range,
)
from posenc.analysis.property_summary import PROPERTY_COLUMNS, EncodingProperties, encoding_properties
from posenc.analysis.signals import make, position_kernel, position_signal

__all__ = [
    "PROPERTY_COLUMNS",
    "EncodingProperties",
    "IntegerIndexGrowth",
    "LinearMap",
    "TutorialSimilarityCheck",
    "Sensitivity",
    "TranslationResidual",
    "Uniqueness",
    "ValueRange",
    "affine_relative_map",
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
    "tutorial_similarity_check",
    "similarity_matrix",
    "sinusoidal_shift_matrix",
    "sinusoidal_table",
    "small_model",
    "translation_residual",
    "uniqueness",
    "value_range",
]
