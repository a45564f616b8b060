"""Language policy contract: per-token log-ratio exactly 0 after acting, stop masks, sampling options, exact KL,
entropy, BC, prompt bounds.

Shapes: B batch, P prompt width (obs, BOS included), T completion length (max_new_tokens), V vocabulary (259).
Every model is the tiny one built in code (2 layers, hidden 64, 4 heads) on CPU. Tokens, LoRA, model_path and
bad options: test_language_models.py.
"""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from language_fakes import (
    A_BYTE,
    B_BYTE,
    C_BYTE,
    NEWLINE,
    PROMPTS,
    P,
    T,
    assert_one_line,
    make_policy,
    override_logits,
    zeros_like_float,
)

from robopt.core.protocols import Policy, SupportsEntropy, SupportsImitation, SupportsKL
from robopt.llm.policy import LanguagePolicy, LanguagePolicyConfig, build_language_policy
from robopt.llm.tokens import BOS, EOS, PAD

pytest.importorskip("transformers")
pytest.importorskip("peft")


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_protocols_and_act_shapes(architecture):
    policy = make_policy(architecture=architecture)
    assert isinstance(policy, Policy) and isinstance(policy, SupportsImitation) and isinstance(policy, SupportsKL)
    assert not isinstance(policy, SupportsEntropy)  # token_entropy(obs, action) instead, documented
    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs)
    assert action.shape == (4, T) and action.dtype == torch.int64
    assert set(info) == {"log_prob", "mask", "ref_log_prob"}
    assert info["mask"].dtype == torch.bool and info["mask"].shape == (4, T)
    assert info["log_prob"].shape == (4, T) and info["log_prob"].dtype == torch.float32
    assert torch.all(info["log_prob"] <= 0) and torch.all(info["log_prob"][info["mask"]] < 0)
    # no special token but EOS is ever sampled; the reference is the initial weights: equal log-probs
    assert not torch.any((action == BOS) | ((action == PAD) & info["mask"]))
    # The frozen reference (weights without requires_grad) runs the LM head on the sliced hidden states as a bmm,
    # the policy's as a folded mm (torch.matmul folds only for weights that need grad): another kernel, so the
    # same numbers up to float rounding (not bit-equal under MKL's SSE4.2 kernels on an AVX-512 Xeon): 1e-6 relative.
    torch.testing.assert_close(info["ref_log_prob"], info["log_prob"], rtol=1e-6, atol=1e-6)
    policy.normalizer.update(obs)  # what the on-policy loop calls: a no-op
    with pytest.raises(NotImplementedError, match="not exported"):
        policy.export_module()


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
@pytest.mark.parametrize("deterministic", [False, True])
def test_log_ratio_exactly_zero_after_act_then_moves_with_gradient(architecture, deterministic):
    policy = make_policy(architecture=architecture)
    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs, deterministic=deterministic)
    log_ratio = policy.log_ratio(obs, action, info)
    assert log_ratio.shape == (4, T) and torch.equal(log_ratio, zeros_like_float(action))

    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-3)
    loss = -policy.token_log_prob(obs, action).sum()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

    log_ratio = policy.log_ratio(obs, action, info)
    assert log_ratio.requires_grad
    assert torch.all(log_ratio[info["mask"]] != 0)  # every real token's probability moved
    assert log_ratio[info["mask"]].mean() > 0  # ... upward: the step raised their likelihood
    log_ratio.sum().backward()
    gradients = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert gradients and sum(g.abs().sum() for g in gradients) > 0
    assert all(p.grad is None for p in policy.reference.parameters())  # the reference is frozen


def test_log_ratio_zero_where_mask_is_false():
    policy = make_policy()
    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs)
    info = {**info, "log_prob": info["log_prob"] - 1.0, "mask": info["mask"].clone()}
    info["mask"][:, 3:] = False
    log_ratio = policy.log_ratio(obs, action, info)
    assert torch.allclose(log_ratio[:, :3], torch.ones(4, 3))  # new - (old - 1) = 1
    assert torch.equal(log_ratio[:, 3:], torch.zeros(4, T - 3))


def test_log_ratio_is_clamped():
    policy = make_policy(log_ratio_clamp=0.5)
    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs)
    shifted = {**info, "log_prob": info["log_prob"] + 3.0 * info["mask"]}
    assert torch.allclose(policy.log_ratio(obs, action, shifted)[info["mask"]], torch.tensor(-0.5))


@pytest.mark.parametrize("deterministic", [False, True])
def test_stop_byte_masks_the_rest(deterministic):
    policy = make_policy()

    def a_then_newline(ids, logits):
        # after 'a': a newline is almost certain; after anything else: 'a' (so the completion is "a\n")
        bias = torch.zeros_like(logits)
        after_a = (ids == A_BYTE).unsqueeze(-1)
        bias[..., NEWLINE] = torch.where(after_a.squeeze(-1), 100.0, 0.0)
        bias[..., A_BYTE] = torch.where(after_a.squeeze(-1), 0.0, 100.0)
        return logits + bias

    override_logits(policy, a_then_newline)
    obs = policy.encode_prompts(["12+3=", "xy"])
    action, info = policy.act(obs, deterministic=deterministic)
    assert action.tolist() == [[A_BYTE, NEWLINE] + [PAD] * (T - 2)] * 2
    assert info["mask"].int().tolist() == [[1, 1] + [0] * (T - 2)] * 2
    assert torch.equal(info["log_prob"][:, 2:], torch.zeros(2, T - 2))
    assert torch.all(info["log_prob"][:, :2] > -1e-3)  # bias 100: probability ~1
    assert torch.equal(policy.log_ratio(obs, action, info), zeros_like_float(action))
    assert policy.decode_completions(action) == ["a", "a"]


def test_eos_stops_a_row_when_stop_is_empty():
    policy = make_policy(stop="")

    def newline_then_eos(ids, logits):
        bias = torch.zeros_like(logits)
        after_newline = ids == NEWLINE
        bias[..., EOS] = torch.where(after_newline, 100.0, 0.0)
        bias[..., NEWLINE] = torch.where(after_newline, 0.0, 100.0)
        return logits + bias

    override_logits(policy, newline_then_eos)
    action, info = policy.act(policy.encode_prompts(["q"]), deterministic=True)
    assert action.tolist() == [[NEWLINE, EOS] + [PAD] * (T - 2)]  # newline is an ordinary byte here
    assert info["mask"].int().tolist() == [[1, 1] + [0] * (T - 2)]
    assert policy.decode_completions(action) == ["\n"]


def test_deterministic_act_is_repeatable_and_sampling_is_not():
    policy = make_policy()
    obs = policy.encode_prompts(PROMPTS)
    first, first_info = policy.act(obs, deterministic=True)
    second, second_info = policy.act(obs, deterministic=True)
    assert torch.equal(first, second) and torch.equal(first_info["log_prob"], second_info["log_prob"])
    torch.manual_seed(1)
    sampled, _ = policy.act(obs)
    torch.manual_seed(2)
    other, _ = policy.act(obs)
    assert not torch.equal(sampled, other)  # 24 tokens from ~257 ids each: a collision is astronomically unlikely
    torch.manual_seed(1)
    again, _ = policy.act(obs)
    assert torch.equal(sampled, again)  # sampling uses torch's global generator


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_token_log_prob_by_hand_from_unpadded_logits(architecture):
    policy = make_policy(architecture=architecture)
    tokenizer = policy.tokenizer
    obs = policy.encode_prompts(["12+3=", "hi"])  # row 1 is left-padded by 7
    action = torch.tensor([[49, 53, NEWLINE, PAD, PAD, PAD], [104, 105, 33, 33, 33, 33]])
    log_prob = policy.token_log_prob(obs, action)
    # by hand for row 1: the unpadded sequence BOS h i | h i ! ! ! !, default positions 0.., logits at the 6
    # positions before each completion token, softmax over the action vocabulary (bytes and EOS; not PAD, BOS)
    ids = torch.tensor([[BOS, *tokenizer.encode("hi"), *action[1].tolist()]])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0, 2:-1]  # [T, V]: position 2 + t predicts a_t
    logits[:, [PAD, BOS]] = float("-inf")
    expected = torch.log_softmax(logits, -1).gather(-1, action[1].unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(log_prob[1], expected, atol=1e-5)
    # row 0: the stop byte ends the completion: 0 after it, the 3 real tokens scored
    assert torch.equal(log_prob[0, 3:], torch.zeros(3)) and torch.all(log_prob[0, :3] < 0)


def test_temperature_and_top_p_change_sampling_but_log_prob_is_at_temperature_one():
    """Logits fixed to log(0.5, 0.3, 0.2) on a, b, c (every other id ~ -inf); one token per row, 2000 rows.

    temperature 1: (0.5, 0.3, 0.2). temperature 0.5: p^2 / sum p^2 = (0.25, 0.09, 0.04) / 0.38 = (0.658, 0.237,
    0.105). top_p 0.6: mass before a, b, c = 0, 0.5, 0.8: keep a and b -> (0.5, 0.3) / 0.8 = (0.625, 0.375, 0).
    Frequencies over 2000 draws have std <= sqrt(0.25 / 2000) = 0.011: tolerance 0.05 is 4.5 std.
    """
    fixed = torch.full((259,), -1e9)
    fixed[[A_BYTE, B_BYTE, C_BYTE]] = torch.tensor([0.5, 0.3, 0.2]).log()
    cases = {
        (1.0, 1.0): (0.5, 0.3, 0.2),
        (0.5, 1.0): (0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38),
        (1.0, 0.6): (0.625, 0.375, 0.0),
    }
    obs = None
    for (temperature, top_p), expected in cases.items():
        config = LanguagePolicyConfig(max_new_tokens=1, temperature=temperature, top_p=top_p)
        policy = LanguagePolicy(config, prompt_width=2)  # BOS x: short rows keep 2000 of them fast
        override_logits(policy, lambda ids, logits: fixed.expand_as(logits))
        obs = policy.encode_prompts(["x"]).expand(2000, -1) if obs is None else obs
        action, info = policy.act(obs)
        frequencies = torch.stack([(action[:, 0] == byte).float().mean() for byte in (A_BYTE, B_BYTE, C_BYTE)])
        assert torch.allclose(frequencies, torch.tensor(expected), atol=0.05), (temperature, top_p, frequencies)
        assert torch.all((action == A_BYTE) | (action == B_BYTE) | (action == C_BYTE))  # nothing else
        # log-probabilities are the untempered model's: log 0.5 for every 'a', log 0.3 for every 'b'
        for byte, p in ((A_BYTE, 0.5), (B_BYTE, 0.3)):
            rows = action[:, 0] == byte
            assert torch.allclose(info["log_prob"][rows, 0], torch.tensor(math.log(p)), atol=1e-6)
        assert torch.equal(policy.log_ratio(obs, action, info), zeros_like_float(action))


def test_imitation_loss_fits_a_completion_that_greedy_act_then_produces():
    policy = make_policy()
    obs = policy.encode_prompts(["7+5="])
    target = policy.encode_completions(["12"])  # "12\n": the stop byte is appended
    assert target.tolist() == [[49, 50, NEWLINE, PAD, PAD, PAD]]
    optimizer = torch.optim.Adam(policy.parameters(), lr=3e-3)
    losses = []
    for _ in range(50):
        loss = policy.imitation_loss(obs, target)
        assert loss.shape == (1,)
        optimizer.zero_grad()
        loss.mean().backward()
        optimizer.step()
        losses.append(loss.item())
    # initial loss ~ log 257 = 5.55 (a random model is near uniform over the action vocabulary)
    assert abs(losses[0] - math.log(257)) < 0.5 and losses[-1] < 0.1 * losses[0]
    action, info = policy.act(obs, deterministic=True)
    assert torch.equal(action, target) and policy.decode_completions(action) == ["12"]
    assert info["mask"].int().tolist() == [[1, 1, 1, 0, 0, 0]]


def test_exact_kl_and_entropy_against_torch_distributions():
    policy = make_policy(store_old_logits=True)
    obs = policy.encode_prompts(PROMPTS)
    action, info = policy.act(obs)
    assert info["vocab_log_prob"].shape == (4, T, 259) and torch.equal(info["completion"], action)
    assert torch.equal(policy.kl(obs, info), zeros_like_float(action))  # same weights: exactly 0

    frozen = copy.deepcopy(policy)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.05)
    policy.imitation_loss(obs, action).sum().backward()
    optimizer.step()

    kl = policy.kl(obs, info)
    assert kl.shape == (4, T) and kl.requires_grad
    valid = [i for i in range(259) if i not in (PAD, BOS)]
    with torch.no_grad():
        old_logits = frozen.model(input_ids=torch.tensor([[BOS, *policy.tokenizer.encode(PROMPTS[1])]])).logits
        new_logits = policy.model(input_ids=torch.tensor([[BOS, *policy.tokenizer.encode(PROMPTS[1])]])).logits
    old = torch.distributions.Categorical(logits=old_logits[0, -1, valid])
    new = torch.distributions.Categorical(logits=new_logits[0, -1, valid])
    # first completion token of row 1: its context is the prompt alone
    assert torch.allclose(kl[1, 0], torch.distributions.kl_divergence(old, new), rtol=1e-4, atol=1e-7)
    assert kl[1, 0] > 0
    entropy = policy.token_entropy(obs, action)
    assert entropy.shape == (4, T) and torch.allclose(entropy[1, 0], new.entropy(), atol=1e-5)
    assert torch.all(entropy[info["mask"]] > 0) and torch.all(entropy[info["mask"]] <= math.log(257) + 1e-5)

    plain = make_policy()
    _, plain_info = plain.act(obs)
    with pytest.raises(ValueError, match="store_old_logits") as error:
        plain.kl(obs, plain_info)
    assert "\n" not in str(error.value)


def test_build_from_env_uses_its_prompt_bound():
    policy = build_language_policy(LanguagePolicyConfig(max_new_tokens=4), SimpleNamespace(max_prompt_len=12))
    assert policy.obs_dim == 13 and policy.encode_prompts(["x" * 12]).shape == (1, 13)
    default = build_language_policy(LanguagePolicyConfig(max_new_tokens=4), SimpleNamespace())
    assert default.obs_dim == 60  # max_context 64 - max_new_tokens 4
    with pytest.raises(ValueError, match="prompt width 61"):
        build_language_policy(LanguagePolicyConfig(max_new_tokens=4), SimpleNamespace(max_prompt_len=60))


def test_dropout_stays_off_in_train_mode():
    policy = make_policy()
    policy.train()
    assert policy.training and not policy.model.training and not policy.reference.training


def test_too_long_prompt_and_completion_raise_one_line():
    policy = make_policy()
    with pytest.raises(ValueError) as error:
        policy.encode_prompts(["ok", "x" * P])
    assert_one_line(error, "prompt 1 is 11 tokens (BOS included)", "at most 10")
    with pytest.raises(ValueError) as error:
        policy.encode_completions(["x" * T])  # T bytes + the stop byte
    assert_one_line(error, "completion 0 is 7 tokens", "max_new_tokens 6")
    with pytest.raises(ValueError) as error:
        policy.act(torch.full((1, 60), BOS))  # 60 + 6 > max_context 64
    assert_one_line(error, "prompt width 60 + max_new_tokens 6 exceeds max_context 64")
    with pytest.raises(ValueError) as error:
        policy.act(torch.tensor([[BOS, 97, PAD]]))  # right-padded
    assert_one_line(error, "left-padded")
