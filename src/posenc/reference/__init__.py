"""The textbook: one plain NumPy (float64, no torch) function per scheme.

Written to be read next to the papers; every fast PyTorch path in posenc is
tested against these on full tensors. One module per kind's home in
``posenc.encoding``, re-exported here:

- :mod:`~posenc.reference.absolute`: ``posenc.encoding.absolute`` (the sequence members,
  hierarchical positions, the axial members);
- :mod:`~posenc.reference.rotary`: ``posenc.encoding.rotary`` (RoPE, xPos, the RoPE scalings,
  the multi-axis members);
- :mod:`~posenc.reference.bias`: ``posenc.encoding.bias`` (ALiBi, T5, KERPLE, FIRE, Sandwich,
  2-D ALiBi);
- :mod:`~posenc.reference.relative`: ``posenc.encoding.relative`` (Shaw et al., Transformer-XL);
- :mod:`~posenc.reference.contextual`: ``posenc.encoding.contextual`` (CoPE).

``posenc.encoding.none`` (NoPE) adds nothing, so it has no reference. :mod:`~posenc.reference.tutorial`
holds a widely shared tutorial's NumPy classes.
"""

import sys as _sys
from types import ModuleType as _ModuleType

from posenc.core import moved as _moved
from posenc.reference import tutorial  # noqa: F401  (a widely shared tutorial's classes)
from posenc.reference.absolute import *  # noqa: F401,F403
from posenc.reference.bias import *  # noqa: F401,F403
from posenc.reference.contextual import *  # noqa: F401,F403
from posenc.reference.relative import *  # noqa: F401,F403
from posenc.reference.rotary import *  # noqa: F401,F403


def __getattr__(name: str) -> _ModuleType:
    """``posenc.reference.multiaxis`` and the other old module paths of ``posenc.MOVED``, read as
    attributes (``posenc`` itself is imported before any of its packages)."""
    return _moved.resolve(__name__, name, _sys.modules["posenc"].MOVED)


class _Package(_ModuleType):
    """This package, whose function ``hierarchical`` shares its name with an old module path
    (``posenc.reference.hierarchical``, now :mod:`posenc.reference.absolute`). Importing that path
    would make the import system set the aliased module as this package's attribute, over the
    function; a module never replaces a name the package gives that is not a module."""

    def __setattr__(self, name: str, value: object) -> None:
        given = self.__dict__.get(name)
        if isinstance(value, _ModuleType) and given is not None and not isinstance(given, _ModuleType):
            return
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
