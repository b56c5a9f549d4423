"""The request splitter: a prompt batch becomes groups of single-sample requests."""

from actors.splitter.core import split

__all__ = ["split"]
