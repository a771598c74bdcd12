"""The textbook: one plain NumPy (float64, no torch) function per scheme.

Written to be read next to the papers; every fast PyTorch path in posenc is
tested against these on full tensors. Family modules are re-exported here.
"""

from posenc.reference.absolute import *  # noqa: F401,F403

# --- rotary ---
# --- bias ---
# --- relative ---
# --- contextual ---
