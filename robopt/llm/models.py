"""Causal language models of ``LanguagePolicy``: a tiny new GPT-2 or Llama, a local pretrained one, LoRA adapters.

Every model takes the byte tokens of ``robopt.llm.tokens`` (at least ``VOCAB_SIZE`` ids) and runs eager attention
(torch's fused CPU attention has no double backward, which TRPO's Fisher products need); the tiny model has no
dropout. transformers and peft are imported inside the builders: importing this module needs neither.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Protocol

import torch
from torch import nn

from robopt.llm.tokens import BOS, EOS, PAD, VOCAB_SIZE


class ModelOptions(Protocol):
    """The model fields of a language policy's config (``robopt.llm.policy.LanguagePolicyConfig``)."""

    model_path: str
    architecture: str
    layers: int
    hidden: int
    heads: int
    max_context: int
    lora_rank: int
    lora_alpha: float
    lora_targets: tuple[str, ...]


ARCHITECTURES = ("gpt2", "llama")
# peft's usual targets: the attention input projections of each architecture
DEFAULT_LORA_TARGETS = {"gpt2": ("c_attn",), "llama": ("q_proj", "v_proj")}


def tiny_model(config: ModelOptions) -> nn.Module:
    """A new ``config.architecture`` model of ``layers`` x ``hidden`` with ``heads`` and ``max_context`` positions."""
    import transformers

    special = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD}
    c = config
    if c.architecture == "gpt2":
        model_config = transformers.GPT2Config(
            vocab_size=VOCAB_SIZE,
            n_positions=c.max_context,
            n_embd=c.hidden,
            n_layer=c.layers,
            n_head=c.heads,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            **special,
        )
    else:
        model_config = transformers.LlamaConfig(
            vocab_size=VOCAB_SIZE,
            hidden_size=c.hidden,
            intermediate_size=4 * c.hidden,
            num_hidden_layers=c.layers,
            num_attention_heads=c.heads,
            num_key_value_heads=c.heads,
            max_position_embeddings=c.max_context,
            attention_dropout=0.0,
            **special,
        )
    # eager attention: torch's fused CPU attention has no double backward, which TRPO's Fisher products need
    return transformers.AutoModelForCausalLM.from_config(model_config, attn_implementation="eager")


def pretrained_model(config: ModelOptions) -> nn.Module:
    """The causal LM in the local directory ``config.model_path`` in float32 (ValueError with one line if unfit)."""
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


def linear_names(model: nn.Module) -> list[str]:
    """Last name component of every linear layer (nn.Linear or GPT-2's Conv1D), in order, without repeats."""
    from transformers.pytorch_utils import Conv1D

    names = [name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, (nn.Linear, Conv1D))]
    return list(dict.fromkeys(names))


def wrap_lora(model: nn.Module, config: ModelOptions) -> nn.Module:
    """``model`` with rank-``lora_rank`` adapters on ``lora_targets`` (default: ``DEFAULT_LORA_TARGETS`` of its
    type, else every linear module but ``lm_head``); peft freezes every base weight. ValueError for unknown targets.
    """
    import peft
    from transformers.pytorch_utils import Conv1D

    linear = linear_names(model)
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
        r=config.lora_rank,
        lora_alpha=config.lora_alpha,
        target_modules=list(targets),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
        fan_in_fan_out=any(isinstance(m, Conv1D) for m in targeted),
    )
    with warnings.catch_warnings():  # peft 0.21 calls a transformers 5 method deprecated in favour of another
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return peft.get_peft_model(model, lora)
