"""The `seer` command: main.py builds the parser and dispatches to one module per command."""
