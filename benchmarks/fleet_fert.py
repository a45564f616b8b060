"""FERT-lite against plain fleet SAC on the push task: held-out success after the same budget.

    .venv/bin/python benchmarks/fleet_fert.py --seeds 0 1 --steps-per-robot 7500
    .venv/bin/python benchmarks/fleet_fert.py --seeds 0 --steps-per-robot 300 --heldout 2 --episodes 3  # short
    .venv/bin/python benchmarks/fleet_fert.py --smoke    # CI: 1 robot x 100 steps, 32-wide networks, 1 held-out
    .venv/bin/python benchmarks/fleet_fert.py --seeds 0 1 2 3 --variant min20 "fleet.fert_min_episodes=20" \
        --variant adv "fleet.fert_weighting=binary fleet.fert_unique=true"      # FERT variants (docs/fleet.md)

Both variants run ``configs/fleet_fert_push.yaml`` (4 robots with their own box mass and friction, SAC + HER, the
same env steps per robot and so the same number of SAC updates); ``fleet.fert=false`` is plain fleet SAC, and
``fleet.fert=true`` adds, after every SAC update, a behaviour-cloning step of the actor (weight ``fleet.fert_coef``)
on (obs, action) pairs that failed episodes retrieved from the fleet's successful segments
(``robopt.fleet.retrieval``). Success is scored as in ``fleet_scaling.py``: ``--heldout`` unseen robots,
``--episodes`` deterministic episodes each. ``--variant NAME "key=value ..."`` (repeatable) adds a FERT run with
those overrides; ``--baselines plain`` (or ``fert``) runs only that one of the two beside them; ``--set`` overrides
every run. Runs go one at a time,
the variants interleaved per seed. ``--records FILE`` appends each run's record as it ends (two processes on other
seeds can share one file), and ``--report FILE ...`` prints the table of such files without running anything.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import mean_std, quiet_train  # noqa: E402
from fleet_scaling import heldout_success, last_metrics  # noqa: E402
from smoke import parse_smoke_args  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "fleet_fert_push.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps-per-robot", type=int, default=7500)
    parser.add_argument("--heldout", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument(
        "--variant",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "OVERRIDES"),
        help='a FERT variant: a name and its "key=value ..." overrides (fleet.fert=true is implied)',
    )
    parser.add_argument(
        "--no-baselines",
        dest="baselines",
        action="store_const",
        const=[],
        help="run only the --variant runs",
        default=argparse.SUPPRESS,  # the default is --baselines' (first added, this one's None hid it)
    )
    parser.add_argument(
        "--baselines",
        nargs="*",
        choices=["plain", "fert"],
        default=["plain", "fert"],
        help="which of plain fleet SAC and FERT-lite to run beside the variants (default both)",
    )
    parser.add_argument("--records", type=Path, help="append each run's record to this JSON-lines file as it ends")
    parser.add_argument("--report", type=Path, nargs="+", help="print the table of these records files; run nothing")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more overrides of every run")
    tiny = [
        "fleet.num_robots=1",
        "total_steps=100",
        "policy.hidden=[32,32]",
        "algo.critic_hidden=[32,32]",
        "algo.loop.learning_starts=50",
        "algo.loop.batch_size=32",
    ]
    args = parse_smoke_args(
        parser, smoke={"seeds": [0], "steps_per_robot": 100, "heldout": 1, "episodes": 2, "set": tiny}
    )
    if args.report:
        return report([json.loads(line) for path in args.report for line in path.read_text().splitlines() if line])
    baselines = {"plain": ["fleet.fert=false"], "fert": ["fleet.fert=true"]}
    variants = [(name, baselines[name]) for name in args.baselines]
    variants += [(name, ["fleet.fert=true", *overrides.split()]) for name, overrides in args.variant]
    if len({name for name, _ in variants}) < len(variants) or not variants:
        parser.error("--variant names must be unique, not plain or fert, and at least one run must be left")
    print(
        f"fleet_fert {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
        f"{os.cpu_count()} cores | {' '.join(sys.argv[1:]) or '(defaults)'}",
        flush=True,
    )
    records = []
    with tempfile.TemporaryDirectory() as temporary:
        for seed in args.seeds:
            for name, variant in variants:
                overrides = [
                    f"seed={seed}", *variant, f"fleet.steps_per_robot={args.steps_per_robot}",
                    f"total_steps={4 * args.steps_per_robot}", f"log.run_root={temporary}", "log.progress=false",
                    "log.eval_episodes=0", "log.checkpoint_every=1000", *args.set,
                ]  # fmt: skip
                start = time.perf_counter()
                run_dir, _ = quiet_train(CONFIG, overrides)
                seconds = time.perf_counter() - start
                success, _ = heldout_success(run_dir, args.heldout, args.episodes)
                logged = last_metrics(run_dir)
                records.append(
                    {
                        "seed": seed,
                        "name": name,
                        "success": success,
                        "seconds": seconds,
                        "updates": logged.get("learner_updates", float("nan")),
                        "pool": logged.get("fert_pool_segments", 0.0),
                        "targets": logged.get("fert_targets", 0.0),
                    }
                )
                train_success = logged.get("success_rate", float("nan"))
                if args.records is not None:
                    with args.records.open("a") as records_file:
                        records_file.write(json.dumps({**records[-1], "overrides": variant}) + "\n")
                print(
                    f"  seed {seed} {name:5}: held-out success {success:.3f} | learner updates "
                    f"{records[-1]['updates']:.0f} | pool segments {records[-1]['pool']:.0f} | targets "
                    f"{records[-1]['targets']:.0f} | last training "
                    f"success {train_success:.2f} | {seconds:.0f} s",
                    flush=True,
                )
    return report(records)


def report(records: list[dict]) -> int:
    """Per variant (in first-seen order): held-out success per seed, mean +- std and wall time; then each variant
    against plain fleet SAC on the seeds both ran: the mean paired difference with its 95% bootstrap interval."""
    import numpy as np

    from robopt.sweeps.report import interval

    names = list(dict.fromkeys(record["name"] for record in records))
    by_name = {name: {r["seed"]: r for r in records if r["name"] == name} for name in names}
    print(f"\n{'variant':8} {'seeds':>12} {'held-out success per seed':>44} {'mean +- std':>14} {'wall s':>16}")
    for name in names:
        mine = [by_name[name][seed] for seed in sorted(by_name[name])]
        seeds = " ".join(str(r["seed"]) for r in mine)
        each = ", ".join(f"{r['success']:.3f}" for r in mine)
        print(
            f"{name:8} {seeds:>12} {each:>44} {mean_std([r['success'] for r in mine]):>14} "
            f"{mean_std([r['seconds'] for r in mine]):>16}"
        )
    for name in (n for n in names if n != "plain" and "plain" in by_name):
        seeds = sorted(set(by_name[name]) & set(by_name["plain"]))
        if seeds:
            gap = np.array([by_name[name][s]["success"] - by_name["plain"][s]["success"] for s in seeds])
            low, high = interval(gap, np.mean)
            listed = " ".join(map(str, seeds))
            print(
                f"{name} - plain over seeds {listed}: {gap.mean():+.3f} [{low:+.3f}, {high:+.3f}], "
                f"better on {int((gap > 0).sum())} of {len(seeds)}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
