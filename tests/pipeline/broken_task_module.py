"""A module that fails on import (the task lookup must say why)."""

raise ImportError("needs a package that is not installed: frobnicate")
