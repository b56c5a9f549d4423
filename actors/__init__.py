"""The actors: one package per actor (splitter, estimator, scheduler, generator, drafts,
dispatcher, trainer), each a pure core in a thin async shell; beside them the runtime
(base.py), shared errors (errors.py) and model/ (the policy model, sampling, weights)."""
