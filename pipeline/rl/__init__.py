"""The RL recipe on top of the rollout: the GRPO loop (loop.py), its configuration
(config.py: RunConfig), trainer ranks and the driver's watch over them (ranks.py), Earl's
parallelism selector (selector.py) and layout switch (layout_switch.py), and the live
progress report (report.py)."""
