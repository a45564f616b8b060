"""Language policy: a causal language model (Hugging Face transformers, optional LoRA through peft) as a Policy.

Shapes: B batch (or N envs), P prompt width (obs), T completion length (``max_new_tokens``), V vocabulary size.

Tokens are bytes (``ByteTokenizer``, robopt.llm.tokens): ids 0..255 are the UTF-8 bytes, then PAD=256, BOS=257,
EOS=258. An observation is a batch of prompts ``obs [B, P]`` int64, each BOS + prompt bytes, left-padded with PAD
so that generation continues from the right edge; an action is the completion ``action [B, T]`` int64, PAD after
the row stopped. A row stops at the stop byte (``stop``, a newline by default) or EOS; ``mask [B, T]`` is true up to
and including that token. The action vocabulary is the 256 bytes and EOS: PAD, BOS and any id above EOS get
probability 0 (their logits are set to -inf) in sampling and in every log-probability, entropy and KL below.

Acting samples token by token with a KV cache, at ``temperature`` and nucleus ``top_p`` (greedy when
deterministic). The stored ``log_prob`` is then recomputed by one full forward pass over prompt + completion at
temperature 1, the same computation ``log_ratio`` and ``token_log_prob`` run: the ratio is exactly 0 at the acting
weights, and it is the ratio of the untempered model (pi_theta(a_t | s, a_<t) as PPO/GRPO on language models use
it; with temperature != 1 or top_p < 1 the samples come from a sharpened version of it). Dropout is always off: the
policy keeps its model in eval mode whatever ``train()`` says, since dropout would make the ratio noisy.

The model is a tiny new GPT-2 or Llama or a local pretrained one, optionally with LoRA adapters (built by
robopt.llm.models). The reference (for the reference-KL penalty, ``ref_log_prob``; the algorithm estimates the KL
with ``robopt.core.losses.kl_estimate``) is a frozen copy of the initial weights under full fine-tuning, and the
same model with its adapters disabled under LoRA (no copy).

Abilities: ``kl(obs, info) -> [B, T]`` is the exact per-token KL(pi_act || pi_current) over the vocabulary; it
needs the acting log-softmax, stored only when ``store_old_logits`` is on. ``imitation_loss`` is the masked mean
negative log-likelihood of a demonstrated completion (the BC path). ``token_entropy(obs, action) -> [B, T]`` is the
per-token entropy at the completion's positions; SupportsEntropy's ``entropy(obs)`` is not provided (the entropy of
a language policy is a per-position quantity that needs the completion). ``export_module`` is not supported.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import torch
from torch import nn

from robopt.core.protocols import Memoryless
from robopt.llm.models import ARCHITECTURES, pretrained_model, tiny_model, wrap_lora
from robopt.llm.tokens import (
    EOS,
    PAD,
    ByteTokenizer,
    action_log_softmax,
    completion_mask,
    encode_prompts,
    gather_tokens,
    sample_tokens,
)
from robopt.options import option

KL_ESTIMATORS = ("k1", "k3")


@dataclass(frozen=True)
class LanguagePolicyConfig:
    name: str = option("language", "policy kind", ("language",))
    model_path: str = option("", "local Hugging Face directory of a byte-vocabulary causal LM ('': a tiny new model)")
    architecture: str = option("gpt2", "architecture of the new model when model_path is empty", ARCHITECTURES)
    layers: int = option(2, "transformer blocks of the new model")
    hidden: int = option(64, "hidden width of the new model")
    heads: int = option(4, "attention heads of the new model (divides hidden)")
    max_context: int = option(64, "longest prompt + completion in tokens (the new model's position table)")
    lora_rank: int = option(0, "LoRA rank (0: full fine-tuning of every weight)")
    lora_alpha: float = option(16.0, "LoRA scaling numerator (the update is scaled by lora_alpha / lora_rank)")
    lora_targets: tuple[str, ...] = option(
        (), "module names LoRA adapts (empty: gpt2 c_attn, llama q_proj and v_proj; else every linear module)"
    )
    temperature: float = option(1.0, "sampling temperature (log-probabilities are always at temperature 1)")
    top_p: float = option(1.0, "nucleus sampling: sample from the smallest set of tokens with this much mass")
    max_new_tokens: int = option(8, "completion length T: tokens generated at most per prompt")
    stop: str = option("\n", "one ASCII character that ends a completion ('': only EOS ends it)")
    kl_estimator: str = option("k1", "reference-KL estimator per token (used by the algorithm)", KL_ESTIMATORS)
    kl_coef: float = option(0.0, "weight of the reference KL penalty (used by the algorithm; 0: none)")
    log_ratio_clamp: float = option(20.0, "clamp per-token log-ratios to +-this (a guard against overflow)")
    store_old_logits: bool = option(
        False, "keep the acting log-softmax [B, T, V] in info so kl() can compute the exact per-token KL"
    )

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if not self.temperature > 0.0:
            raise ValueError(f"temperature must be > 0 (use deterministic acting for greedy), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank must be >= 0 (0: full fine-tuning), got {self.lora_rank}")
        if not self.lora_alpha > 0.0:
            raise ValueError(f"lora_alpha must be > 0, got {self.lora_alpha}")
        if len(self.stop) > 1 or (self.stop and ord(self.stop) > 127):
            raise ValueError(f"stop must be one ASCII character or '', got {self.stop!r}")
        if self.max_context < self.max_new_tokens + 2:
            raise ValueError(
                f"max_context ({self.max_context}) must be >= max_new_tokens + 2 ({self.max_new_tokens + 2}): "
                "room for BOS, one prompt byte and the completion"
            )
        if self.layers < 1 or self.hidden < 1 or self.heads < 1 or self.hidden % self.heads:
            raise ValueError(
                f"layers, hidden and heads must be >= 1 with heads dividing hidden, got {self.layers}, "
                f"{self.hidden}, {self.heads}"
            )
        if not self.log_ratio_clamp > 0.0:
            raise ValueError(f"log_ratio_clamp must be > 0, got {self.log_ratio_clamp}")
        if self.kl_coef < 0.0:
            raise ValueError(f"kl_coef must be >= 0, got {self.kl_coef}")


class NoNormalizer(nn.Module):
    """Token ids are not normalized: ``update`` does nothing and ``forward`` is the identity."""

    enabled = False

    def update(self, x: torch.Tensor) -> None:
        pass

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class LanguagePolicy(nn.Module, Memoryless):
    """A causal LM acting on byte prompts ``obs [B, P]`` with completions ``action [B, T]`` and per-token ratios."""

    def __init__(self, config: LanguagePolicyConfig | None = None, prompt_width: int | None = None) -> None:
        """``prompt_width`` P is the obs width (BOS included; default max_context - max_new_tokens)."""
        super().__init__()
        config = config or LanguagePolicyConfig()
        self.config = config
        width = config.max_context - config.max_new_tokens if prompt_width is None else prompt_width
        if not 2 <= width <= config.max_context - config.max_new_tokens:
            raise ValueError(
                f"prompt width {width} (BOS included) must be in 2..{config.max_context - config.max_new_tokens} "
                f"(max_context {config.max_context} - max_new_tokens {config.max_new_tokens})"
            )
        self.obs_dim, self.action_dim = width, config.max_new_tokens
        self.tokenizer = ByteTokenizer()
        self.stop_id = self.tokenizer.encode(config.stop)[0] if config.stop else None
        self.normalizer = NoNormalizer()
        model = pretrained_model(config) if config.model_path else tiny_model(config)
        forward_parameters = inspect.signature(type(model).forward).parameters
        self._cache_name = "cache" if "cache" in forward_parameters else "past_key_values"  # transformers 5 vs 4
        if config.lora_rank > 0:
            self.model = wrap_lora(model, config)  # peft freezes every base weight
            self.reference = None  # the base model with adapters disabled
        else:
            self.reference = copy.deepcopy(model).requires_grad_(False)
            self.model = model
        self.train(True)

    def train(self, mode: bool = True) -> LanguagePolicy:
        """Sets ``training`` but keeps the language models in eval mode: dropout stays off (see module docstring)."""
        super().train(mode)
        self.model.eval()
        if self.reference is not None:
            self.reference.eval()
        return self

    def reset_reference(self) -> None:
        """Make the current weights the reference of the KL penalty (after ``init_from`` loaded a warm start).

        Under LoRA the reference stays the base model with adapters disabled (what the adapters were added to).
        """
        if self.reference is not None:
            self.reference.load_state_dict(self.model.state_dict())

    # ------------------------------------------------------------ text

    def encode_prompts(self, prompts: list[str]) -> torch.Tensor:
        """obs [B, P] int64 on the model's device: BOS + prompt bytes, left-padded with PAD."""
        return encode_prompts(prompts, self.obs_dim, self.tokenizer).to(self._device())

    def encode_completions(self, completions: list[str], add_stop: bool = True) -> torch.Tensor:
        """action [B, T] int64 (PAD-filled) of demonstrated completions; ``add_stop`` appends the stop byte."""
        rows = []
        for i, text in enumerate(completions):
            if add_stop and self.config.stop and not text.endswith(self.config.stop):
                text = text + self.config.stop
            ids = self.tokenizer.encode(text)
            if len(ids) > self.action_dim:
                raise ValueError(f"completion {i} is {len(ids)} tokens, more than max_new_tokens {self.action_dim}")
            rows.append(ids + [PAD] * (self.action_dim - len(ids)))
        return torch.tensor(rows, dtype=torch.int64, device=self._device()).reshape(len(completions), self.action_dim)

    def decode_completions(self, action: torch.Tensor) -> list[str]:
        """The text of each completion [B, T] up to, not including, its stop byte or EOS."""
        mask = completion_mask(action, self.stop_id)
        ended = (action == EOS) | (action == self.stop_id) if self.stop_id is not None else action == EOS
        keep = (mask & ~ended).cpu()
        return [self.tokenizer.decode(row[k].tolist()) for row, k in zip(action.cpu(), keep, strict=True)]

    # ------------------------------------------------------------ model calls

    def _device(self) -> torch.device:
        return next(self.model.parameters()).device

    @staticmethod
    def _ids(x: torch.Tensor) -> torch.Tensor:
        """Token ids as int64: the rollout storage keeps observations and actions as float32 (exact below 2^24)."""
        if x.dtype != torch.int64:
            return x.round().long()
        return x.clone() if x.is_inference() else x  # rollout tensors are inference tensors: autograd cannot save them

    def _check_obs(self, obs: torch.Tensor) -> None:
        if obs.dim() != 2 or obs.dtype != torch.int64:
            raise ValueError(f"obs must be prompts [B, P] int64, got shape {tuple(obs.shape)} {obs.dtype}")
        if obs.shape[1] + self.action_dim > self.config.max_context:
            raise ValueError(
                f"prompt width {obs.shape[1]} + max_new_tokens {self.action_dim} exceeds max_context "
                f"{self.config.max_context}"
            )
        if bool((obs[:, -1] == PAD).any()):
            raise ValueError("obs rows must end with a prompt token (left-padded with PAD; see encode_prompts)")

    def _completion_log_softmax(self, obs: torch.Tensor, action: torch.Tensor, reference: bool = False):
        """log pi(. | prompt, a_<t) [B, T, V] at temperature 1 by one forward pass over prompt + completion."""
        ids = torch.cat((self._ids(obs), self._ids(action)), dim=1)  # [B, P + T]
        attention = (ids != PAD).long()
        position = (attention.cumsum(-1) - 1).clamp(min=0)  # left padding: the first real token is position 0
        kwargs = {"input_ids": ids, "attention_mask": attention, "position_ids": position}
        kwargs["logits_to_keep"] = action.shape[1] + 1  # positions P - 1 .. P + T - 1
        if not reference:
            logits = self.model(**kwargs).logits
        elif self.reference is not None:
            logits = self.reference(**kwargs).logits
        else:
            with self.model.disable_adapter():
                logits = self.model(**kwargs).logits
        return action_log_softmax(logits[:, :-1])  # [B, T, V]: position P - 1 + t predicts a_t

    def _generate(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """Completion [B, T] sampled token by token with a KV cache; PAD after each row's stop byte or EOS."""
        batch, steps = obs.shape[0], self.action_dim
        attention = (obs != PAD).long()
        positions = (attention.cumsum(-1) - 1).clamp(min=0)  # [B, P], as in _completion_log_softmax
        out = self.model(input_ids=obs, attention_mask=attention, position_ids=positions, use_cache=True)
        position = positions[:, -1:]  # [B, 1]
        action = torch.full((batch, steps), PAD, dtype=torch.int64, device=obs.device)
        done = torch.zeros(batch, dtype=torch.bool, device=obs.device)
        for t in range(steps):
            token = sample_tokens(out.logits[:, -1], self.config.temperature, self.config.top_p, deterministic)
            token = torch.where(done, PAD, token)
            action[:, t] = token
            done = done | (token == EOS)
            if self.stop_id is not None:
                done = done | (token == self.stop_id)
            if t == steps - 1 or bool(done.all()):
                break
            # rows that are done keep feeding PAD (attended: their later logits are never used)
            attention = torch.cat((attention, attention.new_ones(batch, 1)), dim=1)
            position = position + 1
            cache = out.get("cache") if self._cache_name == "cache" else out.past_key_values
            kwargs = {self._cache_name: cache}
            out = self.model(
                input_ids=token.unsqueeze(1), attention_mask=attention, position_ids=position, use_cache=True, **kwargs
            )
        return action

    # ------------------------------------------------------------ Policy

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Completion ``action [B, T]`` int64 and info at the acting weights, all [B, T] and 0 where mask is false:

        ``log_prob`` per-token log pi(a_t | s, a_<t) at temperature 1 (whatever ``temperature`` and ``top_p``
        sampled with), ``mask`` bool, ``ref_log_prob`` the reference model's; with ``store_old_logits`` also
        ``vocab_log_prob`` [B, T, V] (the acting log-softmax) and ``completion`` [B, T] (a copy of the action).
        """
        if torch.is_grad_enabled():
            with torch.no_grad():
                return self.act(obs, deterministic)
        obs = self._ids(obs)
        self._check_obs(obs)
        action = self._generate(obs, deterministic)
        mask = completion_mask(action, self.stop_id)
        log_probs = self._completion_log_softmax(obs, action)  # the computation log_ratio repeats
        info = {
            "log_prob": gather_tokens(log_probs, action, mask),
            "mask": mask,
            "ref_log_prob": gather_tokens(self._completion_log_softmax(obs, action, reference=True), action, mask),
        }
        if self.config.store_old_logits:
            info["vocab_log_prob"] = log_probs
            info["completion"] = action.clone()
        return action, info

    def token_log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Differentiable log pi(a_t | s, a_<t) [B, T] at temperature 1; 0 after the stop and at PAD."""
        action = self._ids(action)
        return gather_tokens(self._completion_log_softmax(obs, action), action, completion_mask(action, self.stop_id))

    def log_ratio(self, obs: torch.Tensor, action: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """Per-token log(pi_new / pi_act) [B, T], clamped to +-log_ratio_clamp; 0 where info['mask'] is false."""
        mask, action = info["mask"], self._ids(action)
        mask = mask.clone() if mask.is_inference() else mask
        new = gather_tokens(self._completion_log_softmax(obs, action), action, mask)
        bound = self.config.log_ratio_clamp
        diff = torch.clamp(new - info["log_prob"], -bound, bound)
        return torch.where(mask, diff, torch.zeros_like(diff))

    @property
    def kl_available(self) -> bool:
        """Whether ``kl`` can run: it needs the acting log-softmax (``store_old_logits``)."""
        return self.config.store_old_logits

    def kl(self, obs: torch.Tensor, info: dict[str, torch.Tensor]) -> torch.Tensor:
        """Exact KL(pi_act || pi_new) per token [B, T] over the vocabulary; 0 where the mask is false.

        sum_v p_act(v) (log p_act(v) - log p_new(v)) at each completion position; needs ``store_old_logits``.
        """
        if "vocab_log_prob" not in info:
            raise ValueError("kl needs the acting log-softmax: set policy.store_old_logits=true")
        old, mask = info["vocab_log_prob"].clone(), info["mask"].clone()  # clones: the rollout's are inference tensors
        new = self._completion_log_softmax(obs, info["completion"])
        valid = torch.isfinite(old)  # tokens outside the action vocabulary have p = 0 under both
        terms = torch.where(valid, old.exp() * (old - new), torch.zeros_like(old))
        per_token = terms.sum(-1)
        return torch.where(mask, per_token, torch.zeros_like(per_token))

    def token_entropy(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Entropy of the current policy [B, T] at each completion position; 0 after the stop and at PAD."""
        action = self._ids(action)
        log_probs = self._completion_log_softmax(obs, action)
        valid = torch.isfinite(log_probs)
        terms = torch.where(valid, log_probs.exp() * log_probs, torch.zeros_like(log_probs))
        entropy = -terms.sum(-1)
        return torch.where(completion_mask(action, self.stop_id), entropy, torch.zeros_like(entropy))

    def imitation_loss(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood [B] of the demonstrated completion's tokens (up to its stop, PAD masked)."""
        action = self._ids(action)
        mask = completion_mask(action, self.stop_id)
        log_prob = gather_tokens(self._completion_log_softmax(obs, action), action, mask)
        return -log_prob.sum(-1) / mask.sum(-1).clamp(min=1)

    def export_module(self) -> nn.Module:
        raise NotImplementedError("language policies are not exported to ONNX (export_module is for robot policies)")


def build_language_policy(config: LanguagePolicyConfig, env) -> LanguagePolicy:
    """Obs width = env.max_prompt_len + 1 (the longest prompt in bytes, plus BOS); the default without it."""
    env_tokens = getattr(env, "action_dim", config.max_new_tokens)
    if env_tokens != config.max_new_tokens:
        raise ValueError(
            f"policy.max_new_tokens={config.max_new_tokens} but the env takes completions of {env_tokens} tokens: "
            "set env.kwargs.max_new_tokens to the same value"
        )
    max_prompt_len = getattr(env, "max_prompt_len", None)
    return LanguagePolicy(config, None if max_prompt_len is None else int(max_prompt_len) + 1)
