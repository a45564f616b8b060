"""FERT-lite against plain fleet SAC on the push task: held-out success after the same budget.

    .venv/bin/python benchmarks/fleet_fert.py --seeds 0 1 --steps-per-robot 7500
    .venv/bin/python benchmarks/fleet_fert.py --seeds 0 --steps-per-robot 300 --heldout 2 --episodes 3  # smoke
    .venv/bin/python benchmarks/fleet_fert.py --seeds 0 1 2 3 --variant min20 "fleet.fert_min_episodes=20" \
        --variant adv "fleet.fert_weighting=binary fleet.fert_unique=true"      # FERT variants (docs/fleet.md)

Both variants run ``configs/fleet_fert_push.yaml`` (4 robots with their own box mass and friction, SAC + HER, the
same env steps per robot and so the same number of SAC updates); ``fleet.fert=false`` is plain fleet SAC, and
``fleet.fert=true`` adds, after every SAC update, a behaviour-cloning step of the actor (weight ``fleet.fert_coef``)
on (obs, action) pairs that failed episodes retrieved from the fleet's successful segments
(``robopt.fleet.retrieval``). Success is scored as in ``fleet_scaling.py``: ``--heldout`` unseen robots,
``--episodes`` deterministic episodes each. ``--variant NAME "key=value ..."`` (repeatable) adds a FERT run with
those overrides. Runs go one at a time, the variants interleaved per seed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from finetune_common import mean_std, quiet_train  # noqa: E402
from fleet_scaling import heldout_success, last_metrics  # noqa: E402

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
    parser.add_argument("--no-baselines", action="store_true", help="run only the --variant runs")
    args = parser.parse_args()
    variants = [] if args.no_baselines else [("plain", ["fleet.fert=false"]), ("fert", ["fleet.fert=true"])]
    variants += [(name, ["fleet.fert=true", *overrides.split()]) for name, overrides in args.variant]
    if len({name for name, _ in variants}) < len(variants) or not variants:
        parser.error("--variant names must be unique, not plain or fert, and at least one run must be left")
    print(f"fleet_fert {datetime.datetime.now().isoformat(timespec='seconds')} | torch {torch.__version__} | "
          f"{os.cpu_count()} cores | {' '.join(sys.argv[1:]) or '(defaults)'}", flush=True)  # fmt: skip
    records = []
    with tempfile.TemporaryDirectory() as temporary:
        for seed in args.seeds:
            for name, variant in variants:
                overrides = [
                    f"seed={seed}", *variant, f"fleet.steps_per_robot={args.steps_per_robot}",
                    f"total_steps={4 * args.steps_per_robot}", f"log.run_root={temporary}", "log.progress=false",
                    "log.eval_episodes=0", "log.checkpoint_every=1000",
                ]  # fmt: skip
                start = time.perf_counter()
                run_dir, _ = quiet_train(CONFIG, overrides)
                seconds = time.perf_counter() - start
                success, _ = heldout_success(run_dir, args.heldout, args.episodes)
                logged = last_metrics(run_dir)
                records.append({"seed": seed, "name": name, "success": success, "seconds": seconds,
                                "updates": logged.get("learner_updates", float("nan")),
                                "pool": logged.get("fert_pool_segments", 0.0),
                                "targets": logged.get("fert_targets", 0.0)})  # fmt: skip
                train_success = logged.get("success_rate", float("nan"))
                print(f"  seed {seed} {name:5}: held-out success {success:.3f} | learner updates "
                      f"{records[-1]['updates']:.0f} | pool segments {records[-1]['pool']:.0f} | targets "
                      f"{records[-1]['targets']:.0f} | last training "
                      f"success {train_success:.2f} | {seconds:.0f} s", flush=True)  # fmt: skip
    print(f"\n{'variant':8} {'held-out success':>18} {'wall s':>16}")
    for name, _ in variants:
        mine = [record for record in records if record["name"] == name]
        print(f"{name:8} {mean_std([r['success'] for r in mine]):>18} {mean_std([r['seconds'] for r in mine]):>16}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
