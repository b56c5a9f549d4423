"""A topology of your own on seer-rl's runtime: matrices through four processes.

`python -m examples.demo` (from the repository root) launches a dispatcher, two workers and
a collector as separate processes, streams batches of random symmetric matrices through
them, checks every eigenvalue spectrum that comes back, and prints what each actor did.
It shows how to define messages (`messages.py`, registered with `register_extension`) and
actors (`actors.py`, named in the topology by import path) outside the product.
"""
