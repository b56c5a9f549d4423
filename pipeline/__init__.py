"""What a user touches, in wings from low to high: config/logs, launch/, records/,
rollout/, tasks/, serve/, rl/, sim/, bench/, cli/ (docs/architecture.md); no wing imports a
higher one (tests/test_layering.py)."""
