"""A module that raises on import: an entry point naming it cannot be loaded."""

raise ImportError("a dependency of this scaling package is not installed")
