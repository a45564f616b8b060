"""Language policy pieces around the contract: byte tokens, the reference-KL estimators, LoRA, loading a local
model (model_path) and bad options.

Shapes: B batch, P prompt width (obs, BOS included), T completion length (max_new_tokens), V vocabulary (259).
Every model is the tiny one built in code (2 layers, hidden 64, 4 heads) on CPU. The acting and ratio contract:
test_language_policy.py.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from language_fakes import NEWLINE, PROMPTS, P, assert_one_line, make_policy, zeros_like_float

from robopt.core.losses import KL_ESTIMATORS, kl_estimate
from robopt.core.surrogates import masked_mean
from robopt.llm.policy import KL_ESTIMATORS as POLICY_KL_ESTIMATORS
from robopt.llm.policy import LanguagePolicyConfig
from robopt.llm.tokens import BOS, EOS, PAD, ByteTokenizer, completion_mask

pytest.importorskip("transformers")
pytest.importorskip("peft")


# ---------------------------------------------------------------- tokens and the reference KL


def test_byte_tokenizer_round_trip():
    tokenizer = ByteTokenizer()
    assert tokenizer.encode("hé\n") == [104, 0xC3, 0xA9, 10]  # é is two UTF-8 bytes
    assert tokenizer.decode([BOS, 104, 0xC3, 0xA9, 10, EOS, PAD]) == "hé\n"  # specials skipped
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.vocab_size) == (256, 257, 258, 259)


def test_encode_prompts_left_pads_after_bos():
    policy = make_policy()
    obs = policy.encode_prompts(["ab", ""])
    assert obs.dtype == torch.int64 and obs.shape == (2, P)
    assert obs[0].tolist() == [PAD] * 7 + [BOS, 97, 98]
    assert obs[1].tolist() == [PAD] * 9 + [BOS]


def test_completion_mask_by_hand():
    action = torch.tensor(
        [
            [97, NEWLINE, 98, PAD],  # stop at 1: tokens 0, 1
            [EOS, 97, 97, 97],  # EOS first: token 0 only
            [97, 98, 99, 100],  # never stops: all
            [97, 98, PAD, PAD],  # demonstration without a stop: the real tokens
        ]
    )
    expected = [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert completion_mask(action, NEWLINE).int().tolist() == expected
    assert completion_mask(action, None).int().tolist()[0] == [1, 1, 1, 0]  # newline is an ordinary byte


def test_reference_kl_estimators_by_hand():
    """The PPO loss's reference-KL term: ``kl_estimate`` per token for every ``kl_estimator`` the policy accepts."""
    assert set(POLICY_KL_ESTIMATORS) <= set(KL_ESTIMATORS)
    log_prob = torch.tensor([[-1.0, -0.5]])
    ref = torch.tensor([[-2.0, -0.3]])
    # token 0: log r = log pi_ref - log pi = -1: k1 = 1, k3 = e^(-1) - 1 - (-1) = 0.367879
    # token 1: log r = 0.2: k1 = -0.2 (k1 can be negative), k3 = e^0.2 - 1 - 0.2 = 0.021403
    k1, k3 = kl_estimate(log_prob, ref, "k1"), kl_estimate(log_prob, ref, "k3")
    assert torch.allclose(k1, torch.tensor([[1.0, -0.2]]))
    assert torch.allclose(k3, torch.tensor([[math.exp(-1), math.exp(0.2) - 1.2]]))
    # the loss averages over the real tokens only: with token 1 padded, the mean is token 0's value
    mask = torch.tensor([[True, False]])
    assert masked_mean(k1, mask).item() == pytest.approx(1.0)
    assert masked_mean(k3, mask).item() == pytest.approx(math.exp(-1))


# ---------------------------------------------------------------- LoRA and model_path


@pytest.mark.parametrize(("architecture", "adapted"), [("gpt2", "c_attn"), ("llama", "q_proj")])
def test_lora_trains_only_adapters_and_reference_is_the_base(architecture, adapted):
    policy = make_policy(architecture=architecture, lora_rank=4)
    trainable = [name for name, p in policy.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert any(adapted in name for name in trainable)
    assert policy.reference is None  # no copy: the base with adapters disabled
    frozen = copy.deepcopy(policy)

    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs)
    assert torch.equal(policy.log_ratio(obs, action, info), zeros_like_float(action))
    optimizer = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(2):  # lora_B starts at 0: the first step moves B, the second makes A matter too
        optimizer.zero_grad()
        policy.imitation_loss(obs, action).sum().backward()
        optimizer.step()

    base = {n: p for n, p in frozen.named_parameters() if "lora_" not in n}
    assert all(torch.equal(p, base[n]) for n, p in policy.named_parameters() if "lora_" not in n)
    action, info = policy.act(obs)
    assert torch.equal(policy.log_ratio(obs, action, info), zeros_like_float(action))
    # the reference is the untouched base (the frozen copy's adapters are still 0): same numbers
    assert torch.allclose(info["ref_log_prob"], frozen.token_log_prob(obs, action), atol=1e-6)
    assert not torch.allclose(info["log_prob"], info["ref_log_prob"], atol=1e-3)


def test_save_pretrained_then_model_path_loads_the_same_model(tmp_path):
    policy = make_policy(architecture="llama")
    policy.model.save_pretrained(tmp_path)
    loaded = make_policy(architecture="gpt2", model_path=str(tmp_path))  # architecture is ignored with a path
    assert type(loaded.model).__name__ == "LlamaForCausalLM"
    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs, deterministic=True)
    loaded_action, loaded_info = loaded.act(obs, deterministic=True)
    assert torch.equal(loaded_action, action)
    assert torch.allclose(loaded_info["log_prob"], info["log_prob"], atol=1e-6)
    # the frozen reference's LM head runs as a bmm, the policy's as a folded mm (torch.matmul folds only for weights
    # that need grad): another kernel, equal up to float rounding: 1e-6 relative
    torch.testing.assert_close(loaded_info["ref_log_prob"], loaded_info["log_prob"], rtol=1e-6, atol=1e-6)
    lora = make_policy(model_path=str(tmp_path), lora_rank=2)  # LoRA on a loaded model
    assert all("lora_" in n for n, p in lora.named_parameters() if p.requires_grad)


# ---------------------------------------------------------------- one-line errors


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"temperature": 0.0}, "temperature must be > 0"),
        ({"temperature": -1.0}, "temperature must be > 0"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"top_p": 1.5}, "top_p must be in (0, 1]"),
        ({"lora_rank": -1}, "lora_rank must be >= 0"),
        ({"stop": "ab"}, "stop must be one ASCII character"),
        ({"stop": "é"}, "stop must be one ASCII character"),
        ({"hidden": 30, "heads": 4}, "heads dividing hidden"),
        ({"max_context": 8, "max_new_tokens": 8}, "max_context (8) must be >= max_new_tokens + 2"),
        ({"log_ratio_clamp": 0.0}, "log_ratio_clamp must be > 0"),
    ],
)
def test_bad_options_raise_one_line(overrides, fragment):
    with pytest.raises(ValueError) as error:
        LanguagePolicyConfig(**overrides)
    assert_one_line(error, fragment)


def test_bad_lora_targets_name_them_and_list_the_linear_modules():
    with pytest.raises(ValueError) as error:
        make_policy(lora_rank=2, lora_targets=("q_proj", "c_attn"))
    assert_one_line(error, "['q_proj']", "c_attn, c_proj, c_fc, lm_head")


def test_missing_or_wrong_model_path(tmp_path):
    with pytest.raises(ValueError) as error:
        make_policy(model_path=str(tmp_path / "absent"))
    assert_one_line(error, "is not a directory")
    with pytest.raises(ValueError) as error:
        make_policy(model_path=str(tmp_path))  # empty directory: no config.json
    assert_one_line(error, "does not hold a causal language model")
    import transformers

    transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2).save_pretrained(tmp_path)
    with pytest.raises(ValueError) as error:
        make_policy(model_path=str(tmp_path))  # a vision model's config
    assert_one_line(error, "does not hold a causal language model")
