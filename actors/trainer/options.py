"""TrainerOptions: the policy model, the GRPO update's hyper-parameters, weight publication.

The number of generators to publish to is not an option: it is the topology's count of
"generator" actors, which the trainer reads from its context.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from actors.model.options import ModelOptions
from actors.options import check, check_positive


@dataclass(frozen=True, kw_only=True)
class TrainerOptions:
    """`model`: the same policy the generators hold (a TOML sub-table). `clip_eps`:
    PPO-style clipping of the importance ratio. `max_grad_norm`: gradients are clipped to
    this norm. `pad_id`: the token that pads micro-batches. `bucket_bytes`: the size of one
    weight bucket sent to a generator. `num_threads`: torch threads of the trainer process.
    `seed`: the shuffling and initialisation seed."""

    model: ModelOptions = field(default_factory=ModelOptions)
    #: the learning rate (AdamW)
    lr: float = 1e-4
    #: the KL penalty's weight (> 0: the trainer keeps a frozen copy of the starting model
    #: on `model.device` as the reference, one more model's memory; it is not checkpointed:
    #: a resumed run rebuilds it from `model`, which is the same starting model)
    kl_coef: float = 0.0
    clip_eps: float = 0.2
    max_grad_norm: float = 1.0
    #: samples per forward/backward pass (gradients accumulate)
    micro_batch_size: int = 16
    #: samples per optimiser step (optimiser steps per iteration = samples / this; None:
    #: one optimiser step per epoch)
    mini_batch_size: int | None = None
    #: passes over each iteration's samples
    epochs: int = 1
    pad_id: int = 0
    bucket_bytes: int = 16 << 20
    num_threads: int = 2
    seed: int = 0
    #: a step that fails part-way (a non-finite loss, a lost rank) puts back the weights and
    #: optimiser state of before it, from a copy taken at each step's start on the model's
    #: device (false: no copy; the trainer then refuses to step, publish or save until a
    #: checkpoint is loaded)
    restore_on_failure: bool = True
    #: trainer ranks (the topology's count of "trainer" actors): the host of rank 0's
    #: torch.distributed rendezvous ("" = rank 0's host as the launcher's address book has
    #: it; ignored under torchrun, which sets MASTER_ADDR, and under Ray, whose launcher
    #: sets rank 0's node)
    dist_addr: str = "127.0.0.1"
    #: the rendezvous port (ignored under torchrun, which sets MASTER_PORT, and under Ray,
    #: whose launcher picks a free port on rank 0's node)
    dist_port: int = 29500
    #: how long ranks may take to join (they may start far apart on a loaded host)
    dist_timeout_s: float = 300.0
    #: each collective: a rank whose peer hangs fails its step after this long
    collective_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        check_positive(
            self,
            "lr",
            "clip_eps",
            "max_grad_norm",
            "micro_batch_size",
            "epochs",
            "bucket_bytes",
            "num_threads",
            "dist_timeout_s",
            "collective_timeout_s",
        )
        check(self.kl_coef >= 0, "TrainerOptions.kl_coef", ">= 0", self.kl_coef)
        mini = self.mini_batch_size
        check(mini is None or mini > 0, "TrainerOptions.mini_batch_size", "> 0 or None", mini)
        pad = self.pad_id
        check(
            0 <= pad < self.model.vocab_size,
            "TrainerOptions.pad_id",
            f"a token id below vocab_size {self.model.vocab_size}",
            pad,
        )
