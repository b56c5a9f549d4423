"""A multi-turn test task whose episodes grow over a run: Earl's setting, where the context
grows over training, for the layout-switch test (tests/pipeline/test_layout_switch_episodes.py).

Every prompt runs `CounterEnv` (tests/pipeline/multiturn_envs.py): its reset answers 2
tokens, each step answers `OBS_LEN` tokens and the episode is done at step `done_at`. The
task's k-th draw of prompts (draws of 0 prompts not counted) asks for `1 + GROWTH * k`
turns: it stands in for a policy whose episodes lengthen as it trains. An action is at most
`TURN_TOKENS` tokens (a turn ends at EOS or there), so nearly all of a trajectory's growth
is observation tokens, which a selector counting only the tokens the model sampled (or one
turn's) would not see. Rewards are the environment's (0.25 a step); there is no warm start.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipeline.tasks import TaskPrompt
from transport.messages import EpisodeSpec

VOCAB, EOS = 80, 79  # CounterEnv answers ids 40 (reset) and 60 + t (step t)
OBS_LEN, TURN_TOKENS, GROWTH, MAX_TURNS = 16, 2, 3, 8
PROMPT_LEN = 3
ENVIRONMENT = "tests.pipeline.multiturn_envs:make_counter_env"


class GrowingEpisodes:
    name = "growing-episodes"
    vocab_size = VOCAB
    eos_token_id = EOS
    supports_sft = False
    episode = EpisodeSpec(
        environment=ENVIRONMENT,
        max_turns=MAX_TURNS,
        max_turn_tokens=TURN_TOKENS,
        max_observation_tokens=OBS_LEN,
    )

    def __init__(self) -> None:
        self.draws = 0

    def turns(self, draw: int) -> int:
        return min(1 + GROWTH * draw, MAX_TURNS)

    def sample_prompts(self, n: int, rng: np.random.Generator) -> list[TaskPrompt]:
        if n == 0:
            return []
        done_at = self.turns(self.draws)
        self.draws += 1
        return [
            TaskPrompt(
                prompt_id=f"p{i}",
                token_ids=tuple(int(t) for t in rng.integers(0, 10, PROMPT_LEN)),
                meta={"done_at": done_at, "obs_len": OBS_LEN},
            )
            for i in range(n)
        ]

    def reward(self, prompt: TaskPrompt, completion: Sequence[int]) -> float:
        return 0.0  # an episode's reward is its environment's

    def sft_example(self, prompt: TaskPrompt, rng: np.random.Generator) -> list[int]:
        raise NotImplementedError("no answers: the run starts from a random model")

    def render(self, prompt: TaskPrompt, completion: Sequence[int]) -> str:
        return " ".join(map(str, completion))

    def min_new_tokens(self) -> int:
        """Every turn of the longest episode: reset, actions and all but the last answer."""
        return 2 + MAX_TURNS * TURN_TOKENS + (MAX_TURNS - 1) * OBS_LEN


def make_task() -> GrowingEpisodes:
    return GrowingEpisodes()
