"""The textbook: one plain NumPy (float64, no torch) function per scheme.

Written to be read next to the papers; every fast PyTorch path in posenc is
tested against these on full tensors. Family modules are re-exported here.
"""

from posenc.reference import tutorial  # noqa: F401  (a widely shared tutorial's classes)
from posenc.reference.absolute import *  # noqa: F401,F403

# --- bias ---
from posenc.reference.bias import *  # noqa: F401,F403,E402

# --- contextual ---
from posenc.reference.contextual import *  # noqa: F401,F403,E402
from posenc.reference.hierarchical import *  # noqa: F401,F403

# --- multi-axis (images, video, multimodal sequences) ---
from posenc.reference.multiaxis import *  # noqa: F401,F403,E402

# --- relative ---
from posenc.reference.relative import *  # noqa: F401,F403,E402
from posenc.reference.rope_scaling import *  # noqa: F401,F403,E402

# --- rotary ---
from posenc.reference.rotary import *  # noqa: F401,F403,E402
