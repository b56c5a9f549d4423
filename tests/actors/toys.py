"""Small actors for runtime tests (importable by child processes)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from actors.base import Actor, ActorContext, Handler
from transport.messages import Message, TensorBlob


class Doubler(Actor):
    """Replies to TensorBlob with the tensor doubled; a blob named 'boom' makes it raise."""

    role = "doubler"

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.started = 0
        self.stopped = 0

    def handlers(self) -> Mapping[type[Message], Handler]:
        return {TensorBlob: self.handle_tensor_blob}

    async def on_start(self) -> None:
        self.started += 1

    async def on_stop(self) -> None:
        self.stopped += 1

    async def handle_tensor_blob(self, msg: TensorBlob) -> TensorBlob:
        if msg.name == "boom":
            raise ValueError("asked to fail")
        return TensorBlob(name=msg.name, tensor=torch.as_tensor(msg.tensor) * 2)

    def counters(self) -> dict[str, float]:
        return {"started": self.started}


class BrokenStart(Actor):
    role = "broken"

    async def on_start(self) -> None:
        raise RuntimeError("cannot load the model file /nowhere")
