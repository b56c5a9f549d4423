"""Observations of a multi-turn episode as chat messages, appended as token ids with the fixed
chat-template delta (token in, token out: the model's own tokens are never re-tokenised).

A chat model's trajectory is the templated prompt, the model's action (ending with its
end-of-turn token, e.g. Qwen's ``<|im_end|>``), then an environment message (a tool's
result) wrapped the way the chat template wraps it, ending with the next assistant header,
and so on. ``ChatDelta.from_tokenizer(tokenizer, role="tool")`` works out that wrapping ONCE,
from the tokenizer's own template, by rendering a probe conversation with marker contents:

- ``prefix``: the text the template puts after the assistant's end-of-turn text and before
  the message's content (Qwen: ``"\\n<|im_start|>tool\\n"``);
- ``suffix``: the text after the content, through the next assistant header (Qwen:
  ``"<|im_end|>\\n<|im_start|>assistant\\n"``);
- ``end_text`` / ``end_ids``: the end-of-turn text the template closes an assistant turn
  with, when it is the tokenizer's EOS (the token the model stops on); an action cut before
  it (a turn that hit ``max_turn_tokens``) gets it prepended, so the conversation stays
  well formed.

``delta.ids(tokenizer, content, action_ids)`` is then an observation: ``prefix + content +
suffix`` encoded without special tokens added (the text starts after a special token, so it
tokenises as it would inside the fully templated conversation). The construction checks that
the template is append-only (the prompt with its generation header is a prefix of the
conversation, and the delta after the second turn is the delta after the first); a template
that is not (one that rewrites earlier assistant turns, e.g. drops their ``<think>``
blocks) raises `ChatTemplateError`, as does a template that drops the message's content.
Tests check the delta against full templating of the same conversation."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.tasks.base import TaskError

_USER = "Question?"
_MARKS = ("ASSISTANT_ONE_7f3a", "ASSISTANT_TWO_7f3a")
_SENTINELS = ("MESSAGE_ONE_7f3a", "MESSAGE_TWO_7f3a")


class ChatTemplateError(TaskError):
    """The tokenizer's chat template cannot give a fixed delta for a message (names why)."""


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """What the chat template puts around a `role` message after an assistant turn (module)."""

    role: str
    prefix: str
    suffix: str
    end_text: str
    end_ids: tuple[int, ...]

    @classmethod
    def from_tokenizer(
        cls, tokenizer: Any, role: str = "tool", *, system: str | None = None
    ) -> ChatDelta:
        """The delta of `tokenizer`'s chat template for messages of `role` (see the module);
        `system`: the system message the prompts carry, if any."""
        if not getattr(tokenizer, "chat_template", None):
            raise ChatTemplateError("the tokenizer has no chat template: no chat delta")
        head = [{"role": "system", "content": system}] if system is not None else []
        head.append({"role": "user", "content": _USER})

        def render(messages: list[dict[str, str]], generation: bool) -> str:
            try:
                text = tokenizer.apply_chat_template(
                    messages, tokenize=False, add_generation_prompt=generation
                )
            except Exception as exc:  # jinja raises its own kinds (e.g. an unknown role)
                raise ChatTemplateError(
                    f"the chat template cannot render a {role!r} message after an assistant "
                    f"turn: {exc}"
                ) from exc
            if not isinstance(text, str):
                raise ChatTemplateError(f"the chat template gave {type(text).__name__}, not text")
            return text

        prompt = render(head, True)
        convo = list(head)
        deltas = []
        for mark, sentinel in zip(_MARKS, _SENTINELS, strict=True):
            convo += [{"role": "assistant", "content": mark}, {"role": role, "content": sentinel}]
            full = render(convo, True)
            if not full.startswith(prompt + _MARKS[0]):
                raise ChatTemplateError(
                    "the chat template does not render an assistant turn as the prompt's "
                    "generation header followed by the model's text: no fixed delta"
                )
            at = full.rfind(mark)
            tail = full[at + len(mark) :]
            if tail.count(sentinel) != 1:
                raise ChatTemplateError(
                    f"the chat template does not write a {role!r} message's content once "
                    "after an assistant turn"
                )
            before, _, after = tail.partition(sentinel)
            deltas.append((before, after))
            if full.find(mark) != at:
                raise ChatTemplateError("the chat template repeats an assistant turn's text")
        if deltas[0] != deltas[1]:
            raise ChatTemplateError(
                f"the chat template wraps a {role!r} message differently after the second "
                f"assistant turn ({deltas[0]!r} then {deltas[1]!r}): no fixed delta"
            )
        before, suffix = deltas[0]
        eos = getattr(tokenizer, "eos_token", None)
        end_text = eos if isinstance(eos, str) and eos and before.startswith(eos) else ""
        end_ids = tuple(int(t) for t in tokenizer.encode(end_text, add_special_tokens=False))
        return cls(role, before[len(end_text) :], suffix, end_text, end_ids)

    def text(self, content: str, *, ended: bool = True) -> str:
        """The observation's text for `content`; `ended`: the action ended with the
        end-of-turn token (else its text comes first)."""
        return ("" if ended else self.end_text) + self.prefix + content + self.suffix

    def ids(self, tokenizer: Any, content: str, action_ids: Sequence[int]) -> list[int]:
        """The observation's token ids for `content` after the action `action_ids`."""
        n = len(self.end_ids)
        ended = n == 0 or tuple(action_ids[-n:]) == self.end_ids
        text = self.text(content, ended=ended)
        return [int(t) for t in tokenizer.encode(text, add_special_tokens=False)]
