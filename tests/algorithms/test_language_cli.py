"""Language runs from the CLI: bad input stops with one line and exit code 2, nothing written; eval reports accuracy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
pytest.importorskip("transformers")


def _robopt_process(*args: str) -> subprocess.CompletedProcess:
    """``robopt`` in a process of its own: the installed entry point, end to end."""
    return subprocess.run(
        [sys.executable, "-m", "robopt.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=180
    )


def _robopt(*args: str) -> subprocess.CompletedProcess:
    """The same command line in this process (the refusals: no process start and imports per case, about 2.5 s)."""
    from typer.testing import CliRunner

    from robopt.cli import app

    result = CliRunner().invoke(app, list(args))
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["policy.max_new_tokens=0"], "max_new_tokens must be >= 1, got 0"),
        (["policy.model_path=/nonexistent/model"], "model_path '/nonexistent/model' is not a directory"),
        (["policy.lora_rank=4", "policy.lora_targets=[no_such_module]"], "no_such_module"),
        (["policy.max_context=12"], "prompt width"),
        (["env.kwargs.group_size=7"], "must be a multiple of group_size (7)"),
        (["env.kwargs.digits=9"], "digits"),
        (["algo.reduction=constant"], "reduction=constant needs loss_normalizer > 0"),
        (["policy.max_new_tokens=12"], "set env.kwargs.max_new_tokens to the same value"),
        (["group.enabled=false", "group.leave_one_out=true"], "options of group.enabled=true"),
    ],
    ids=[
        "max_new_tokens",
        "model_path",
        "lora_targets",
        "context",
        "group",
        "task_option",
        "normalizer",
        "tokens",
        "gae_options",
    ],
)
def test_bad_language_input_is_one_line(tmp_path, overrides, message):
    result = _robopt("train", "configs/grpo_addition.yaml", f"log.run_root={tmp_path}", "--no-progress", *overrides)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not any(tmp_path.iterdir())


def test_group_advantage_needs_grouped_rows(tmp_path):
    # a robot run does not read the language variant's group section: refused, not ignored (the check of the env's
    # groups itself: test_dapo_refill.test_a_group_run_needs_rows_in_groups_and_dynamic_sampling_one_process)
    result = _robopt("train", "configs/ppo_pendulum.yaml", f"log.run_root={tmp_path}", "group.enabled=true")
    assert result.returncode == 2 and "group: options of policy.name=language runs" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


def test_trpo_refuses_the_reference_kl_penalty(tmp_path):
    result = _robopt("train", "configs/trpo_addition.yaml", f"log.run_root={tmp_path}", "policy.kl_coef=0.04")
    assert result.returncode == 2 and "policy.kl_coef=0.04 (the reference-KL penalty) is a term of the PPO loss" in (
        result.stderr
    ), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_trpo_needs_the_acting_logits(tmp_path):
    result = _robopt("train", "configs/trpo_addition.yaml", f"log.run_root={tmp_path}", "policy.store_old_logits=false")
    assert result.returncode == 2 and "set policy.store_old_logits=true" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # end to end in other processes: make test, not test-fast
def test_train_then_eval_reports_heldout_accuracy(tmp_path):
    result = _robopt_process(
        "train",
        "configs/grpo_addition.yaml",
        f"log.run_root={tmp_path}",
        "--no-progress",
        "total_steps=128",
        "log.eval_episodes=8",
    )
    assert result.returncode == 0, result.stderr
    (run_dir,) = (tmp_path / "grpo_addition").iterdir()
    result = _robopt_process("eval", str(run_dir), "--episodes", "8", "--pass-k", "4")
    assert result.returncode == 0, result.stderr
    greedy, sampled = result.stdout.strip().splitlines()[-2:]
    assert "success rate" in greedy  # exact-match accuracy on held-out prompts, one greedy completion each
    assert sampled.startswith("pass@4 ") and sampled.endswith("over 8 held-out prompts (4 samples each)")
    assert float(sampled.split()[1]) * 8 in range(9)  # a fraction of the 8 prompts (n = k: any of 4 correct)
    result = _robopt("eval", str(run_dir), "--pass-k", "65")
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == "robopt: error: --pass-k must be in 1..64 (0: off), got 65"


def test_pass_k_needs_a_language_run(tmp_path):
    import yaml

    from robopt.config import config_to_dict
    from robopt.experiment import load_config

    config = load_config(ROOT / "configs/ppo_pendulum.yaml")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config_to_dict(config)))
    result = _robopt("eval", str(tmp_path), "--pass-k", "4")
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "--pass-k needs a language run" in result.stderr
