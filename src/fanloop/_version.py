"""The package version: a leaf module, so modules that need it import nothing else with it.

``pyproject.toml`` reads the version from here (hatch's ``[tool.hatch.version]``).
"""

__version__ = "0.1.0"
