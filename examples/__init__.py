"""Runnable examples; a package so that import paths such as
"examples.custom_task:make_task" resolve from the repository root."""
