"""Records of what happened in a rollout, and pure functions of them.

The records (`transport.messages.RolloutRecord`) are what the scheduler writes during a
rollout: `metrics` computes makespan, throughput, tail, idle time and the lower-bound
efficiency; `trace` saves and loads replayable traces; `plot` draws timelines; `workload`
makes the long-tailed, group-correlated benchmark workload; `sinks` sends a run's
figures to experiment trackers (TensorBoard, wandb).
"""
