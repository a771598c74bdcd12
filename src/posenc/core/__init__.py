"""The leaves of posenc: what every other part builds on, importing nothing of posenc above it.

- :mod:`~posenc.core.errors`: :class:`PosencError` and :class:`PosencTypeError`
- :mod:`~posenc.core.checks`: validation helpers that name the parameter and its valid range
- :mod:`~posenc.core.fields`: :class:`EncodingConfig` and the field markers ``model_field`` / ``length_field``
- :mod:`~posenc.core.positions`: checked sequence positions (:class:`Positions`) and their helpers
- :mod:`~posenc.core.axes`: positions with axes (grids, video, multimodal sequences)
- :mod:`~posenc.core.sincos`: exact float64 sin/cos tables, cast last
- :mod:`~posenc.core.plugins`, :mod:`~posenc.core.code_hash`, :mod:`~posenc.core.trust`: the open
  registries' mechanism, where a class comes from, and consent to code that data names
- :mod:`~posenc.core.datafiles`: data files read into typed dataclasses
- :mod:`~posenc.core.moved`: the old module paths that still import, for one release
"""
