"""The package version, defined once (pyproject reads it; bundles and caches record it)."""
__version__ = "0.1.0"
