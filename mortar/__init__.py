"""Mortar itself: its version, the one place it is written.

`pyproject.toml` reads it for the package's metadata; /readyz, the dashboard's footer and the
OpenAPI document show it. Versions follow Semantic Versioning; while the major is 0 a minor
release may change what it offers (CHANGELOG.md says what each one did).
"""

__version__ = "0.1.0"
