"""Language policy: a causal language model (Hugging Face transformers, optional LoRA through peft) as a Policy.

Shapes: B batch (or N envs), P prompt width (obs), T completion length (``max_new_tokens``), V vocabulary size.

Tokens are bytes (``ByteTokenizer``): ids 0..255 are the UTF-8 bytes, then PAD=256, BOS=257, EOS=258. An
observation is a batch of prompts ``obs [B, P]`` int64, each BOS + prompt bytes, left-padded with PAD so that
generation continues from the right edge; an action is the completion ``action [B, T]`` int64, PAD after the row
stopped. A row stops at the stop byte (``stop``, a newline by default) or EOS; ``mask [B, T]`` is true up to and
including that token. The action vocabulary is the 256 bytes and EOS: PAD, BOS and any id above EOS get
probability 0 (their logits are set to -inf) in sampling and in every log-probability, entropy and KL below.

Acting samples token by token with a KV cache, at ``temperature`` and nucleus ``top_p`` (greedy when
deterministic). The stored ``log_prob`` is then recomputed by one full forward pass over prompt + completion at
temperature 1, the same computation ``log_ratio`` and ``token_log_prob`` run: the ratio is exactly 0 at the acting
weights, and it is the ratio of the untempered model (pi_theta(a_t | s, a_<t) as PPO/GRPO on language models use
it; with temperature != 1 or top_p < 1 the samples come from a sharpened version of it). Dropout is always off: the
policy keeps its model in eval mode whatever ``train()`` says, since dropout would make the ratio noisy.

The reference (for the reference-KL penalty, ``ref_log_prob``) is a frozen copy of the initial weights under full
fine-tuning, and the same model with its adapters disabled under LoRA (no copy).

Abilities: ``kl(obs, info) -> [B, T]`` is the exact per-token KL(pi_act || pi_current) over the vocabulary; it
needs the acting log-softmax, stored only when ``store_old_logits`` is on. ``imitation_loss`` is the masked mean
negative log-likelihood of a demonstrated completion (the BC path). ``token_entropy(obs, action) -> [B, T]`` is the
per-token entropy at the completion's positions; SupportsEntropy's ``entropy(obs)`` is not provided (the entropy of
a language policy is a per-position quantity that needs the completion). ``export_module`` is not supported.
"""

from __future__ import annotations

import copy
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from robopt.config import option

PAD, BOS, EOS = 256, 257, 258
VOCAB_SIZE = 259
ARCHITECTURES = ("gpt2", "llama")
KL_ESTIMATORS = ("k1", "k3")
# peft's usual targets: the attention input projections of each architecture
DEFAULT_LORA_TARGETS = {"gpt2": ("c_attn",), "llama": ("q_proj", "v_proj")}


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255 plus PAD, BOS, EOS; nothing to download."""

    pad_id, bos_id, eos_id, vocab_size = PAD, BOS, EOS, VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text`` (no special tokens)."""
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        """The text of the byte ids in ``ids`` (special ids skipped; invalid UTF-8 replaced)."""
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


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


# ---------------------------------------------------------------- pure functions


def encode_prompts(prompts: list[str], width: int, tokenizer: ByteTokenizer | None = None) -> torch.Tensor:
    """BOS + bytes of each prompt, left-padded with PAD to ``obs [B, width]`` int64 (ValueError if one is longer)."""
    tokenizer = tokenizer or ByteTokenizer()
    rows = []
    for i, prompt in enumerate(prompts):
        ids = [tokenizer.bos_id, *tokenizer.encode(prompt)]
        if len(ids) > width:
            raise ValueError(
                f"prompt {i} is {len(ids)} tokens (BOS included) but the policy takes at most {width} "
                f"(max_context - max_new_tokens or the env's max_prompt_len + 1)"
            )
        rows.append([tokenizer.pad_id] * (width - len(ids)) + ids)
    return torch.tensor(rows, dtype=torch.int64).reshape(len(prompts), width)


def completion_mask(action: torch.Tensor, stop_id: int | None) -> torch.Tensor:
    """mask [B, T] bool: true at every real token up to and including the first stop byte or EOS of each row."""
    ended = action == EOS
    if stop_id is not None:
        ended = ended | (action == stop_id)
    ended = ended.long()
    ends_before = ended.cumsum(-1) - ended  # [B, T] stops strictly before t
    return (ends_before == 0) & (action != PAD)


def action_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log pi over the action vocabulary [..., V] in float32: PAD, BOS and ids above EOS get -inf."""
    ids = torch.arange(logits.shape[-1], device=logits.device)
    invalid = (ids == PAD) | (ids == BOS) | (ids > EOS)  # [V]
    return torch.log_softmax(logits.float().masked_fill(invalid, float("-inf")), dim=-1)


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float, deterministic: bool) -> torch.Tensor:
    """Next tokens [B] from logits [B, V]: argmax, or a draw at ``temperature`` from the top-``top_p`` nucleus.

    Nucleus sampling (Holtzman et al. 2020): keep the most probable tokens while the mass before them is < top_p
    (the smallest set holding at least top_p), renormalize, draw.
    """
    log_probs = action_log_softmax(logits)
    if deterministic:
        return log_probs.argmax(-1)
    probs = torch.softmax(log_probs / temperature, dim=-1)  # -inf / temperature stays -inf: probability 0
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
        return order.gather(-1, torch.multinomial(sorted_probs, 1)).squeeze(-1)
    return torch.multinomial(probs, 1).squeeze(-1)


def gather_tokens(log_probs: torch.Tensor, action: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log pi(a_t) [B, T] from log_probs [B, T, V]; 0 where mask is false (PAD ids are looked up as byte 0)."""
    picked = log_probs.gather(-1, torch.where(mask, action, 0).unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, picked, torch.zeros_like(picked))


def reference_kl(log_prob: torch.Tensor, ref_log_prob: torch.Tensor, mask: torch.Tensor, estimator: str):
    """Per-token estimate [B, T] of KL(pi || pi_ref) from tokens sampled from pi; 0 where mask is false.

    k1 = log pi - log pi_ref (unbiased, can be negative); k3 = r - 1 - log r with r = pi_ref / pi (unbiased,
    never negative; Schulman 2020, "Approximating KL divergence").
    """
    log_r = ref_log_prob - log_prob
    value = -log_r if estimator == "k1" else torch.expm1(log_r) - log_r
    return torch.where(mask, value, torch.zeros_like(value))


# ---------------------------------------------------------------- model construction


def _tiny_model(config: LanguagePolicyConfig) -> nn.Module:
    import transformers

    special = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD}
    c = config
    if c.architecture == "gpt2":
        model_config = transformers.GPT2Config(
            vocab_size=VOCAB_SIZE, n_positions=c.max_context, n_embd=c.hidden, n_layer=c.layers, n_head=c.heads,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **special,
        )  # fmt: skip
    else:
        model_config = transformers.LlamaConfig(
            vocab_size=VOCAB_SIZE, hidden_size=c.hidden, intermediate_size=4 * c.hidden,
            num_hidden_layers=c.layers, num_attention_heads=c.heads, num_key_value_heads=c.heads,
            max_position_embeddings=c.max_context, attention_dropout=0.0, **special,
        )  # fmt: skip
    # eager attention: torch's fused CPU attention has no double backward, which TRPO's Fisher products need
    return transformers.AutoModelForCausalLM.from_config(model_config, attn_implementation="eager")


def _pretrained_model(config: LanguagePolicyConfig) -> nn.Module:
    import transformers

    path = config.model_path
    if not Path(path).is_dir():
        raise ValueError(f"model_path {path!r} is not a directory (a local Hugging Face model directory)")
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, dtype=torch.float32, attn_implementation="eager"
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ValueError(f"model_path {path!r} does not hold a causal language model: {reason}") from None
    vocab = getattr(model.config, "vocab_size", 0) or 0
    if vocab < VOCAB_SIZE:
        raise ValueError(f"model_path {path!r}: vocabulary of {vocab} ids, the byte tokenizer needs {VOCAB_SIZE}")
    positions = getattr(model.config, "max_position_embeddings", None) or getattr(model.config, "n_positions", None)
    if positions is not None and positions < config.max_context:
        raise ValueError(f"model_path {path!r}: {positions} positions, fewer than max_context {config.max_context}")
    return model


def _linear_names(model: nn.Module) -> list[str]:
    """Last name component of every linear layer (nn.Linear or GPT-2's Conv1D), in order, without repeats."""
    from transformers.pytorch_utils import Conv1D

    names = [name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, (nn.Linear, Conv1D))]
    return list(dict.fromkeys(names))


def _wrap_lora(model: nn.Module, config: LanguagePolicyConfig) -> nn.Module:
    import peft
    from transformers.pytorch_utils import Conv1D

    linear = _linear_names(model)
    targets = config.lora_targets or DEFAULT_LORA_TARGETS.get(
        model.config.model_type, tuple(n for n in linear if n != "lm_head")
    )
    missing = [t for t in targets if t not in linear]
    if missing:
        raise ValueError(
            f"lora_targets {missing} are not linear modules of this {model.config.model_type} model; "
            f"its linear modules: {', '.join(linear)}"
        )
    targeted = [m for name, m in model.named_modules() if name.rsplit(".", 1)[-1] in targets]
    lora = peft.LoraConfig(
        r=config.lora_rank, lora_alpha=config.lora_alpha, target_modules=list(targets), lora_dropout=0.0,
        bias="none", task_type="CAUSAL_LM", fan_in_fan_out=any(isinstance(m, Conv1D) for m in targeted),
    )  # fmt: skip
    with warnings.catch_warnings():  # peft 0.21 calls a transformers 5 method deprecated in favour of another
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return peft.get_peft_model(model, lora)


# ---------------------------------------------------------------- policy


class LanguagePolicy(nn.Module):
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
        model = _pretrained_model(config) if config.model_path else _tiny_model(config)
        forward_parameters = inspect.signature(type(model).forward).parameters
        self._cache_name = "cache" if "cache" in forward_parameters else "past_key_values"  # transformers 5 vs 4
        if config.lora_rank > 0:
            self.model = _wrap_lora(model, config)  # peft freezes every base weight
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
