"""`seer bench ...`: benchmarks that run the compared variants side by side, print ratios
and absolute figures, and write a JSON result (docs/benchmarks.md)."""
