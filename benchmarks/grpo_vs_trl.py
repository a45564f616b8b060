"""robopt's GRPO against TRL's ``GRPOTrainer``: same tiny model, warm start, prompts, group size and updates.

    .venv/bin/pip install -e '.[bench]'          # TRL (the benchmark's optional extra; not needed by robopt)
    .venv/bin/python benchmarks/grpo_vs_trl.py --seeds 0 1 2
    .venv/bin/python benchmarks/grpo_vs_trl.py --seeds 0 --budget 512 --sft-examples 500 --sft-epochs 2  # short
    .venv/bin/python benchmarks/grpo_vs_trl.py --smoke    # CI: one 128-completion generation each (robopt alone
                                                          # where TRL is not installed, as in the dev venv)

Per seed, interleaved (robopt then TRL, one seed after the other, one process, ``--threads`` torch threads each):

1. Warm start: ``--sft-examples`` generated solutions of 2-digit addition (20% wrong) cloned by
   ``configs/sft_addition.yaml`` (a byte-level GPT-2 of 2 layers x 64 built in code), as ``grpo_family.py``.
2. robopt: ``configs/grpo_addition.yaml`` from that warm start for ``--budget`` completions.
3. TRL: ``GRPOTrainer`` on the same weights (saved with ``save_pretrained``; TRL loads its reference model from
   there), a ``transformers`` tokenizer over robopt's byte ids (``HFByteTokenizer``: the same ids, BOS first), and
   the same prompts in the same order (``robopt/Text``'s train stream for the seed, no shuffling).

Matched settings: 16 prompts x 8 completions per generation, 2 optimizer steps of 64 completions per generation
(robopt: ``minibatch_size`` 64, 1 epoch; TRL: ``per_device_train_batch_size`` 64, ``steps_per_generation`` 2),
budget / 64 optimizer steps in all; clip 0.2; k3 KL to the warm start with coefficient 0.04; sequence-mean loss
(TRL ``loss_type="grpo"``); rewards minus the group mean over the group std; temperature 1, top-p 1, 8 new tokens,
stop at the newline or EOS, PAD and BOS never sampled; Adam at 5e-5 constant with eps 1e-5, gradient norm 1.

Figures: wall seconds of training (robopt: the loop's iterations; TRL: ``trainer.train()``), of which generation
(robopt: ``OnPolicyLoop.collect``, sampling and scoring; TRL: ``_generate_and_score_completions``, sampling,
scoring and the old/reference log-probabilities) and the rest (updates); completions per second; update seconds
per optimizer step; held-out accuracy of the final weights over ``--episodes`` prompts (both scored by robopt's
greedy evaluation, exact match). robopt/TRL ratios per seed and mean +- std over seeds.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import io
import random
import sys
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import mean_std, quiet_train  # noqa: E402
from grpo_family import sft_dataset  # noqa: E402
from lora_vs_full import timed  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

from robopt.build import build_env, evaluation_env_options  # noqa: E402
from robopt.evaluation import evaluate_policy, evaluate_run, load_policy  # noqa: E402
from robopt.llm.rewards import exact_match  # noqa: E402
from robopt.llm.tasks import STOP, make_task  # noqa: E402
from robopt.llm.tokens import BOS, EOS, PAD  # noqa: E402

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
GROUP, PROMPTS, MINIBATCH = 8, 16, 64  # configs/grpo_addition.yaml: 128 envs = 16 prompts x 8, minibatch 64


def hf_byte_tokenizer():
    """A ``transformers`` slow tokenizer whose ids are robopt's byte ids (``robopt.llm.tokens``), BOS prepended."""
    from transformers import AddedToken, PreTrainedTokenizer

    class HFByteTokenizer(PreTrainedTokenizer):
        model_input_names = ["input_ids", "attention_mask"]

        def __init__(self, **kwargs) -> None:
            names = {PAD: "<pad>", BOS: "<bos>", EOS: "<eos>"}
            kwargs.setdefault("added_tokens_decoder", {i: AddedToken(n, special=True) for i, n in names.items()})
            super().__init__(pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", **kwargs)

        @property
        def vocab_size(self) -> int:
            return 256  # the bytes; PAD, BOS and EOS are the added tokens 256..258

        def get_vocab(self) -> dict[str, int]:
            return {**{chr(i): i for i in range(256)}, **self.added_tokens_encoder}

        def _tokenize(self, text: str, **kwargs) -> list[str]:
            return [chr(b) for b in text.encode("utf-8")]

        def _convert_token_to_id(self, token: str) -> int:
            return ord(token)

        def _convert_id_to_token(self, index: int) -> str:
            return chr(index)

        def convert_tokens_to_string(self, tokens: list[str]) -> str:
            parts = [t.encode() if t in self.added_tokens_encoder else bytes([ord(t)]) for t in tokens]
            return b"".join(parts).decode("utf-8", errors="replace")

        def build_inputs_with_special_tokens(self, ids, pair=None) -> list[int]:
            return [self.bos_token_id, *ids, *(pair or [])]

        def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
            return ()

    return HFByteTokenizer()


def train_prompts(seed: int, count: int) -> list:
    """The first ``count`` problems of ``robopt/Text``'s train stream for ``seed`` (the order robopt's run sees)."""
    task = make_task("addition", seed, digits=2)
    rng = random.Random(f"addition|{seed}|train")  # PromptEnv.reset(seed) seeds its stream like this
    return [problem for _ in range(count // PROMPTS) for problem in task.sample("train", PROMPTS, rng)]


def run_robopt(sft_dir: Path, common: list[str], budget: int) -> tuple[dict, Path]:
    """GRPO by robopt from ``sft_dir``: (seconds by part, run dir)."""
    from robopt.algorithms.onpolicy import OnPolicyLoop
    from robopt.algorithms.ppo import PPO

    seconds: dict[str, float] = defaultdict(float)
    originals = OnPolicyLoop.iteration, OnPolicyLoop.collect, PPO.update
    OnPolicyLoop.iteration = timed(seconds, "train", OnPolicyLoop.iteration)
    OnPolicyLoop.collect = timed(seconds, "generation", OnPolicyLoop.collect)
    PPO.update = timed(seconds, "update", PPO.update)
    try:
        run_dir, _ = quiet_train(
            CONFIGS / "grpo_addition.yaml", [*common, f"total_steps={budget}", f"init_from={sft_dir}"]
        )
    finally:
        OnPolicyLoop.iteration, OnPolicyLoop.collect, PPO.update = originals
    return dict(seconds), run_dir


def run_trl(sft_dir: Path, work: Path, seed: int, budget: int, threads: int):
    """GRPO by TRL from ``sft_dir``'s weights: (seconds by part, trained transformers model)."""
    import datasets
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    _, policy = load_policy(sft_dir)
    model_dir = work / "sft_hf"
    policy.model.save_pretrained(model_dir)  # TRL builds its reference model from the model's own path
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
    model.generation_config.eos_token_id = [EOS, ord(STOP)]  # TRL stops (and masks) at these, as robopt does
    problems = train_prompts(seed, budget // GROUP)
    by_key = {str(problem.meta["key"]): problem for problem in problems}
    dataset = datasets.Dataset.from_dict({"prompt": [p.prompt for p in problems],
                                          "key": [str(p.meta["key"]) for p in problems]})  # fmt: skip

    def exact_match_reward(prompts, completions, key, **kwargs) -> list[float]:
        return [exact_match(completion, by_key[k]) for completion, k in zip(completions, key)]

    args = GRPOConfig(
        output_dir=str(work / "trl"),
        seed=seed,
        use_cpu=True,
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=10**6,
        disable_tqdm=True,
        dataloader_num_workers=0,
        per_device_train_batch_size=MINIBATCH,
        gradient_accumulation_steps=1,
        steps_per_generation=2,
        num_generations=GROUP,
        num_iterations=1,
        max_steps=budget // MINIBATCH,
        shuffle_dataset=False,
        max_completion_length=8,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        generation_kwargs={"suppress_tokens": [PAD, BOS]},
        beta=0.04,
        epsilon=0.2,
        loss_type="grpo",
        scale_rewards="group",
        learning_rate=5e-5,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_epsilon=1e-5,
        max_grad_norm=1.0,
    )
    torch.set_num_threads(threads)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=exact_match_reward,
        args=args,
        train_dataset=dataset,
        processing_class=hf_byte_tokenizer(),
    )
    seconds: dict[str, float] = defaultdict(float)
    trainer._generate_and_score_completions = timed(seconds, "generation", trainer._generate_and_score_completions)
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # TRL prints its metrics dict at the end
        trainer.train()
    seconds["train"] = time.perf_counter() - start
    seconds["update"] = seconds["train"] - seconds["generation"]
    return dict(seconds), trainer.model


def heldout_accuracy(sft_dir: Path, model, episodes: int) -> float:
    """Held-out greedy accuracy of a trained ``transformers`` model, scored as robopt scores its runs."""
    config, policy = load_policy(sft_dir)
    policy.model.load_state_dict(model.state_dict())
    env = build_env(config, num_envs=episodes, **evaluation_env_options(config))
    try:
        return evaluate_policy(policy.eval(), env, episodes, seed=10_000).success_rate
    finally:
        env.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=int, default=16384, help="completions per run (a multiple of 128)")
    parser.add_argument("--episodes", type=int, default=400, help="held-out prompts per evaluation")
    parser.add_argument("--sft-examples", type=int, default=4000)
    parser.add_argument("--sft-epochs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of both runs")
    smoke = {"seeds": [0], "budget": 128, "episodes": 16, "sft_examples": 64, "sft_epochs": 1, "threads": 1}
    args = parse_smoke_args(parser, smoke=smoke)
    if args.budget < GROUP * PROMPTS or args.budget % (GROUP * PROMPTS):
        parser.error(f"--budget must be a positive multiple of {GROUP * PROMPTS}, got {args.budget}")
    import transformers

    peer = not args.smoke or all(importlib.util.find_spec(name) for name in ("trl", "datasets"))
    if peer:
        import datasets
        import trl  # fail early, before the warm starts, when the extra is missing

        datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()  # deprecation notes and weight-loading bars of transformers 5
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)

    versions = f"trl {trl.__version__}" if peer else "trl not installed: --smoke runs robopt's side alone"
    print(
        f"grpo_vs_trl {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"transformers {transformers.__version__} | {versions} | {' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        for seed in args.seeds:
            data = root / f"data{seed}"
            dataset = sft_dataset(data, args.sft_examples, 0.2, seed)
            common = [f"log.run_root={root}/runs", "log.progress=false", "log.eval_episodes=0", f"seed={seed}",
                      f"torch_threads={args.threads}"]  # fmt: skip
            sft_dir, _ = quiet_train(
                CONFIGS / "sft_addition.yaml",
                [
                    *common,
                    f"algo.dataset={dataset}",
                    f"algo.dataset_root={data}",
                    f"algo.epochs={args.sft_epochs}",
                ],
            )
            sft = evaluate_run(sft_dir, args.episodes).success_rate
            ours, run_dir = run_robopt(sft_dir, common, args.budget)
            ours["accuracy"] = evaluate_run(run_dir, args.episodes).success_rate
            pair = [("robopt", ours)]
            if peer:
                theirs, model = run_trl(sft_dir, root / f"trl{seed}", seed, args.budget, args.threads)
                theirs["accuracy"] = heldout_accuracy(sft_dir, model, args.episodes)
                pair.append(("trl", theirs))
            for name, row in pair:
                row.update(
                    seed=seed,
                    name=name,
                    sft=sft,
                    compl_s=args.budget / row["train"],
                    step_s=row["update"] / (args.budget // MINIBATCH),
                )
                print(
                    f"  seed {seed} {name:6}: train {row['train']:7.1f} s (generation {row['generation']:6.1f} s, "
                    f"rest {row['train'] - row['generation']:6.1f} s) | {row['compl_s']:7.1f} completions/s | "
                    f"update {1000 * row['step_s']:6.1f} ms/step | held-out accuracy {sft:.3f} -> "
                    f"{row['accuracy']:.3f}",
                    flush=True,
                )
                rows.append(row)
    print_table(rows)
    return 0


def print_table(rows: list[dict]) -> None:
    """Mean +- std over seeds per library, then robopt / TRL throughput per seed (when TRL ran)."""
    print(f"\n{'':8} {'completions/s':>16} {'generation s':>16} {'update ms/step':>16} {'held-out acc':>14}")
    for name in dict.fromkeys(row["name"] for row in rows):
        mine = [row for row in rows if row["name"] == name]
        print(
            f"{name:8} {mean_std([r['compl_s'] for r in mine]):>16} {mean_std([r['generation'] for r in mine]):>16} "
            f"{mean_std([1000 * r['step_s'] for r in mine]):>16} {mean_std([r['accuracy'] for r in mine]):>14}"
        )
    pairs = list(zip(rows[0::2], rows[1::2]))
    if not pairs or pairs[0][1]["name"] != "trl":
        return
    ratios = [ours["compl_s"] / theirs["compl_s"] for ours, theirs in pairs]
    print(
        f"robopt / TRL throughput: {mean_std(ratios)} (per seed: {', '.join(f'{r:.2f}' for r in ratios)}); "
        f"warm start accuracy {mean_std([a['sft'] for a, _ in pairs])}"
    )


if __name__ == "__main__":
    sys.exit(main())
