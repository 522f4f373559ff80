"""The package's version, its one source: `acp_fast.__version__` re-exports it and the build
reads it statically into the wheel's metadata (`pyproject.toml`). A module of its own so
that any module of the package can name the version without importing the package face."""

__version__ = "0.1.0"
