"""Byte tokens of language policies: the tokenizer and pure functions on token ids and logits.

Shapes: B batch, P prompt width, T completion length, V vocabulary size (``VOCAB_SIZE``).

Tokens are bytes (``ByteTokenizer``): ids 0..255 are the UTF-8 bytes, then PAD=256, BOS=257, EOS=258. A prompt row
is BOS + prompt bytes, left-padded with PAD (``encode_prompts``); a completion row stops at the stop byte or EOS,
PAD after it (``completion_mask``). The action vocabulary is the 256 bytes and EOS: PAD, BOS and any id above EOS
get probability 0 (``action_log_softmax`` sets their logits to -inf).
"""

from __future__ import annotations

import torch

PAD, BOS, EOS = 256, 257, 258
VOCAB_SIZE = 259


class ByteTokenizer:
    """UTF-8 bytes as token ids 0..255 plus PAD, BOS, EOS; nothing to download."""

    pad_id, bos_id, eos_id, vocab_size = PAD, BOS, EOS, VOCAB_SIZE

    def encode(self, text: str) -> list[int]:
        """The UTF-8 bytes of ``text`` (no special tokens)."""
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        """The text of the byte ids in ``ids`` (special ids skipped; invalid UTF-8 replaced)."""
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


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
