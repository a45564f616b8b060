"""A verifiable text task as a batched single-step VecEnv: ``robopt/Text`` (the on-policy loop's env for language).

Shapes: N rows = prompts x G (``group_size``), P prompt width in tokens, T completion length (``max_new_tokens``).

Each row holds one prompt; rows come in consecutive groups of G that share a prompt (what ``group.enabled: true``
baselines against). ``step(action [N, T])`` decodes every completion, scores it with the task's verifier
(``robopt.llm.rewards.Verifier``) and ends every row's episode (``terminated``): the reward is the episode's
return, the next observation a freshly drawn prompt. Observations are the byte-token ids of ``BOS + prompt``,
left-padded with PAD, as float32 ``[N, P]`` (the rollout storage is float; ids below 2^24 are exact), and actions
the completion's token ids (any dtype; PAD after a row's stop token).

``info`` adds ``accuracy`` [N] (exact match, whatever the reward weights) and ``verifier_failed`` [N] (a reward
function raised or returned a non-number: the row scored 0). When more than ``max_failure_rate`` of the rows
scored so far failed (after at least 64), ``step`` raises a one-line ``ConfigError``: a broken verifier stops the
run instead of training on zeros.
"""

from __future__ import annotations

import random

import torch

from robopt.llm.rewards import Verifier, exact_match, sft_completion
from robopt.llm.tasks import SPLITS, STOP, make_task
from robopt.llm.tokens import PAD, VOCAB_SIZE, ByteTokenizer, encode_prompts
from robopt.options import ConfigError


class PromptEnv:
    """Prompts of a verifiable task, G rows per prompt, one completion per episode (see module docstring)."""

    def __init__(
        self,
        num_envs: int,
        device: str | torch.device = "cpu",
        task: str = "addition",
        group_size: int = 8,
        split: str = "train",
        rewards: dict[str, float] | None = None,
        max_new_tokens: int = 8,
        prompt_width: int = 0,
        max_failure_rate: float = 0.5,
        expert_error_rate: float = 0.0,
        seed: int = 0,
        **options: int,
    ) -> None:
        if group_size < 1 or num_envs % group_size:
            raise ValueError(f"num_envs ({num_envs}) must be a multiple of group_size ({group_size}) >= 1")
        if split not in SPLITS:
            raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.task = make_task(task, seed, **options)
        self.verifier = Verifier(rewards or {"exact_match": 1.0})
        self.env_id, self.num_envs, self.device = "robopt/Text", num_envs, torch.device(device)
        self.group_size, self.split, self.max_failure_rate = group_size, split, max_failure_rate
        if not 0.0 <= expert_error_rate <= 1.0:
            raise ValueError(f"expert_error_rate must be in [0, 1], got {expert_error_rate}")
        self.expert_error_rate = expert_error_rate
        self.tokenizer = ByteTokenizer()
        longest = max(len(p.prompt) for p in self.task.sample(split, 512))
        self.obs_dim = prompt_width or longest + 3  # BOS + the longest prompt seen + a margin of 2
        self.max_prompt_len = self.obs_dim - 1  # what the language policy sizes its input by (BOS excluded)
        self.action_dim = max_new_tokens
        self.action_low = torch.zeros(max_new_tokens, device=self.device)
        self.action_high = torch.full((max_new_tokens,), float(VOCAB_SIZE - 1), device=self.device)
        self._rng = random.Random(f"{task}|{seed}|{split}")
        self.scored, self.failures = 0, 0
        self.problems: list = []
        self._obs = self._draw()

    def _draw(self) -> torch.Tensor:
        prompts = self.task.sample(self.split, self.num_envs // self.group_size, self._rng)
        self.problems = [problem for problem in prompts for _ in range(self.group_size)]
        obs = encode_prompts([p.prompt for p in self.problems], self.obs_dim, self.tokenizer)
        return obs.to(self.device, torch.float32)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        if seed is not None:
            self._rng = random.Random(f"{self.task.name}|{seed}|{self.split}")
        self._obs = self._draw()
        return self._obs.clone()

    def decode(self, action: torch.Tensor) -> list[str]:
        """The completions' text, up to and including each row's stop token."""
        texts = []
        for row in action.detach().round().long().cpu().tolist():
            ids = [i for i in row if i != PAD]
            text = self.tokenizer.decode(ids)
            texts.append(text[: text.index(STOP) + 1] if STOP in text else text)
        return texts

    def step(self, action: torch.Tensor):
        if action.shape != (self.num_envs, self.action_dim):
            raise ValueError(
                f"robopt/Text: action must have shape [{self.num_envs}, {self.action_dim}], got {list(action.shape)}"
            )
        completions = self.decode(action)
        row_scores = [self.verifier.score(c, p) for c, p in zip(completions, self.problems)]  # None: failed
        failed = [score is None for score in row_scores]
        scores, failures = [0.0 if score is None else score for score in row_scores], sum(failed)
        self.scored += self.num_envs
        self.failures += failures
        if self.scored >= 64 and self.failures > self.max_failure_rate * self.scored:
            raise ConfigError(
                f"robopt/Text: the verifier failed on {self.failures} of {self.scored} completions (more than "
                f"{self.max_failure_rate:.0%}): its reward functions raise or return non-numbers"
            )
        accuracy = [exact_match(c, p) for c, p in zip(completions, self.problems)]
        reward = torch.tensor(scores, dtype=torch.float32, device=self.device)
        final_obs = self._obs
        self._obs = self._draw()
        done = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        info = {
            "final_obs": final_obs,
            "episode_return": reward.clone(),
            "episode_length": torch.ones(self.num_envs, dtype=torch.int64, device=self.device),
            "accuracy": torch.tensor(accuracy, dtype=torch.float32, device=self.device),
            "is_success": torch.tensor(accuracy, device=self.device) > 0.5,  # robopt eval's success rate
            "verifier_failed": torch.tensor(failed, device=self.device),
        }
        return self._obs.clone(), reward, done, torch.zeros_like(done), info

    def state_dict(self) -> dict:
        """The prompt stream's state (``--resume`` continues it): RNG, the current rows' problems, counters."""
        keys = [problem.meta["key"] for problem in self.problems]
        return {"rng": self._rng.getstate(), "keys": keys, "scored": self.scored, "failures": self.failures}

    def load_state_dict(self, state: dict) -> None:
        self._rng.setstate(state["rng"])
        self.problems = [self.task.problem(key) for key in state["keys"]]
        self.scored, self.failures = int(state["scored"]), int(state["failures"])
        obs = encode_prompts([p.prompt for p in self.problems], self.obs_dim, self.tokenizer)
        self._obs = obs.to(self.device, torch.float32)

    def close(self) -> None:
        pass


def text_expert(env: PromptEnv, seed: int, error_rate: float | None = None):
    """``robopt/Text``'s scripted solver: each row's correct answer (wrong with ``env.expert_error_rate``) + stop.

    Returns ``act(obs [N, P]) -> completion ids [N, T]`` (PAD-filled) for the env's current problems: the
    demonstrations of a supervised warm start (``robopt collect --expert robopt/Text``, then ``robopt pretrain``).
    """
    rate = env.expert_error_rate if error_rate is None else error_rate
    rng = random.Random(f"expert|{seed}")

    def act(obs: torch.Tensor) -> torch.Tensor:
        rows = []
        for problem in env.problems:
            ids = env.tokenizer.encode(sft_completion(problem, rate, rng))[: env.action_dim]
            rows.append(ids + [PAD] * (env.action_dim - len(ids)))
        return torch.tensor(rows, dtype=torch.float32, device=env.device)

    return act


def make_prompt_env(num_envs: int, device: str | torch.device = "cpu", **kwargs) -> PromptEnv:
    try:
        return PromptEnv(num_envs, device, **kwargs)
    except ConfigError as error:  # the task's own option checks: one line, as the env's
        raise ValueError(str(error)) from None
