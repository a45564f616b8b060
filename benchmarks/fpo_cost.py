"""Where FPO's extra time goes compared with Gaussian PPO, per component, on CPU (HalfCheetah, native MuJoCo).

Builds the two configs being compared, ``configs/ppo_halfcheetah_fast.yaml`` (Gaussian policy, PPO) and
``configs/fpo_halfcheetah.yaml`` (flow policy, FPO: K integration steps, M draws), with the runner's builders,
and times, after --warmup calls, the median over --repeats calls of:

    act           one ``policy.act(obs)`` on the N env rows under ``torch.inference_mode`` (as the loop acts):
                  Gaussian; flow at K in --steps (M = the config's draws), split for the flow into ``sample``
                  (normalization and the K-step integration) and the act-time CFM loss over M in --draws
                  (drawing the M (noise, flow time) pairs and one pass of the velocity net over N x M rows)
    env.step      one step of the native env (N rows), for scale
    update step   one ``updater.step(lambda: ppo_loss(...))`` on a fixed minibatch (eager, without metrics as in
                  all epochs but the last): PPO's, and FPO's at M in --draws; the minibatch is drawn from a
                  rollout collected by ``OnPolicyLoop.collect`` + ``advantages()`` with a policy of M draws

Per iteration the model is T * (act + env.step) + epochs * ceil(T * N / minibatch) * update step; it is printed
beside the measured time of --iterations full ``loop.iteration()`` calls (after one warm-up iteration) for each
config, with env steps/s from both and their FPO/PPO ratio. "other" is measured minus model: rollout storage,
reward scaling, the critic pass and GAE, the after-update log-ratio over the whole batch, normalizer updates.
Shares are of the measured iteration of the config a row belongs to; variant rows (other K or M) show what they
would cost per iteration. A grid gives the model's FPO steps/s for every K x M (act cost additive in sample_K and
loss_M), and one line "FPO cost = ..." names what dominates the extra time. Torch runs on --threads threads; the
simulator steps on its own threads (``env.kwargs.num_threads``, default 2).

    .venv/bin/python benchmarks/fpo_cost.py --steps 1 5 10 --draws 1 4 8 --repeats 100 --threads 1
    .venv/bin/python benchmarks/fpo_cost.py --repeats 5 --iterations 1    # a short run at the configs' sizes
    .venv/bin/python benchmarks/fpo_cost.py --smoke    # CI: K 1 and M 1 beside the config's, 8 envs x 8 steps
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
from smoke import parse_smoke_args  # benchmarks/ is the script's directory, so its sibling imports

from robopt.algorithms import ALGORITHMS
from robopt.algorithms.kinds import build_critic
from robopt.algorithms.onpolicy import OnPolicyLoop
from robopt.algorithms.ppo import ppo_loss
from robopt.buffers.rollout import RolloutBatch
from robopt.build import build_env, build_policy, seed_everything
from robopt.config import config_to_dict
from robopt.experiment import load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
PPO_CONFIG = CONFIGS / "ppo_halfcheetah_fast.yaml"
FPO_CONFIG = CONFIGS / "fpo_halfcheetah.yaml"


def median_micros(call: Callable[[], object], repeats: int, warmup: int, inference: bool = False) -> float:
    """Median microseconds of ``call()`` over ``repeats`` calls after ``warmup`` untimed ones.

    ``inference`` runs the whole timing loop in one ``torch.inference_mode`` block, as ``collect`` does.
    """
    if inference:
        with torch.inference_mode():
            return median_micros(call, repeats, warmup)
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter_ns()
        call()
        times.append(time.perf_counter_ns() - start)
    return statistics.median(times) / 1e3


def build_loop(path: Path, overrides: list[str]) -> OnPolicyLoop:
    """Seeded env, policy, critic, algorithm and on-policy loop of a config (``key=value`` overrides)."""
    config = load_config(path, overrides)
    seed_everything(config.seed)
    env = build_env(config)
    policy, critic = build_policy(config, env), build_critic(config, env)
    algorithm = ALGORITHMS[config_to_dict(config)["algo"]["name"]].build.make(config.algo, policy, critic)
    return OnPolicyLoop(env, policy, critic, algorithm, config.rollout, seed=config.seed)


def with_steps(policy, steps: int):
    """A copy of a flow policy (weights and normalizer) that integrates with ``steps`` steps."""
    config = dataclasses.replace(policy.config, steps=steps)
    copy = type(policy)(policy.obs_dim, policy.action_dim, policy.action_low, policy.action_high, config)
    copy.load_state_dict(policy.state_dict())
    return copy


def rollout_minibatch(loop: OnPolicyLoop) -> RolloutBatch:
    """One rollout collected by the loop's policy, with advantages; a fixed random minibatch of it."""
    loop.collect()
    batch = loop.advantages()
    rows = torch.randperm(len(batch))[: loop.algorithm.config.minibatch_size]
    return batch.index(rows)


def update_micros(loop: OnPolicyLoop, minibatch: RolloutBatch, repeats: int, warmup: int) -> float:
    """Median microseconds of one first-order PPO/FPO step on ``minibatch``; parameters and Adam state restored."""
    algorithm, updater = loop.algorithm, loop.algorithm.updater
    saved_params, saved_state = updater.flat.detach().clone(), updater.state_dict()

    def step() -> None:
        updater.step(lambda: ppo_loss(loop.policy, loop.critic, minibatch, algorithm.config, algorithm.control, False))

    micros = median_micros(step, repeats, warmup)
    with torch.no_grad():
        updater.flat.copy_(saved_params)
    updater.load_state_dict(saved_state)
    return micros


def act_timings(ppo: OnPolicyLoop, fpo: OnPolicyLoop, steps: list[int], draws: list[int], args) -> dict:
    """Microseconds of the act-time components on the loops' current observations [N, D]."""
    obs, flow, repeats, warmup = fpo.obs, fpo.policy, args.repeats, args.warmup
    timings = {("act", "gaussian"): median_micros(lambda: ppo.policy.act(ppo.obs), repeats, warmup, True)}
    for k in steps:
        policy = with_steps(flow, k)
        timings[("act", k)] = median_micros(lambda p=policy: p.act(obs), repeats, warmup, True)
        timings[("sample", k)] = median_micros(lambda p=policy: p.sample(obs), repeats, warmup, True)
    with torch.inference_mode():
        obs_norm = flow.normalizer(obs)  # [N, D]
        y = flow.to_normalized(flow.sample(obs, obs_norm=obs_norm))  # [N, A]
    n, a = y.shape

    def act_loss(m: int) -> torch.Tensor:  # what act does after sampling: M draws and one pass over N x M rows
        noise, t = torch.randn(n, m, a), torch.rand(n, m)  # [N, M, A], [N, M]
        return flow.cfm_loss(obs_norm, y, noise, t)  # [N, M]

    for m in draws:
        timings[("loss", m)] = median_micros(lambda m=m: act_loss(m), repeats, warmup, True)
    return timings


def env_micros(loop: OnPolicyLoop, repeats: int, warmup: int) -> float:
    """Median microseconds of one ``env.step`` (N rows) with a clamped Gaussian action (auto-reset included)."""
    env = loop.env
    with torch.inference_mode():
        action = torch.clamp(loop.policy.act(loop.obs)[0], env.action_low, env.action_high)  # [N, A]
    return median_micros(lambda: env.step(action), repeats, warmup, True)


def measured_seconds(loop: OnPolicyLoop, iterations: int) -> float:
    """Mean wall-clock seconds of one ``loop.iteration()`` over ``iterations`` after one warm-up iteration."""
    loop.iteration(progress=0.0)
    start = time.perf_counter()
    for _ in range(iterations):
        loop.iteration(progress=0.0)
    return (time.perf_counter() - start) / iterations


def update_count(loop: OnPolicyLoop) -> int:
    """Minibatch steps per iteration: epochs x ceil(T * N / minibatch)."""
    config = loop.algorithm.config
    return config.epochs * math.ceil(loop.steps_per_iteration / config.minibatch_size)


def print_table(rows: list[tuple], measured: dict[str, float]) -> None:
    """rows: (label, rows per call, us per call or None, calls per iteration or None, config key or None, ms)."""
    header = f"{'component':<36} {'rows':>5} {'us/call':>10} {'calls/iter':>10} {'ms/iter':>9} {'share':>7}"
    print(header)
    print("-" * len(header))
    for label, size, micros, calls, key, ms in rows:
        if size is None:
            print(label)
            continue
        share = f"{100 * ms / (1e3 * measured[key]):6.1f}%" if key else f"{'-':>7}"
        micros_text = f"{micros:10.1f}" if micros is not None else f"{'-':>10}"
        calls_text = f"{calls:10d}" if calls is not None else f"{'-':>10}"
        print(f"{label:<36} {size!s:>5} {micros_text} {calls_text} {ms:9.2f} {share}")


def cost_line(t: dict, steps_k: int, draws_m: int, horizon: int, updates: int, models: dict, ratio: float) -> str:
    """The "FPO cost = ..." summary: FPO's extra model time (ms per iteration) over PPO, split into parts.

    integration: T * (sample_K - Gaussian act); draws: T * act-time loss_M + updates * (update_M - update_1);
    flow update: updates * (update_1 - PPO's update), the velocity net's update at one draw (when M = 1 was not
    timed, the draws take the whole update difference); rest of acting: T * (act - sample_K - loss_M).
    """
    base = ("update", 1) if ("update", 1) in t else ("update", "ppo")
    integration = horizon * (t[("sample", steps_k)] - t[("act", "gaussian")]) / 1e3
    draws_act = horizon * t[("loss", draws_m)] / 1e3
    draws_update = updates * (t[("update", draws_m)] - t[base]) / 1e3
    flow_update = updates * (t[base] - t[("update", "ppo")]) / 1e3
    rest = horizon * (t[("act", steps_k)] - t[("sample", steps_k)] - t[("loss", draws_m)]) / 1e3
    extra, draws = models["fpo"] - models["ppo"], draws_act + draws_update
    beyond = "beyond M=1" if base[1] == 1 else "vs PPO's (M=1 not timed)"
    parts = {f"integration steps at acting (K={steps_k})": integration, f"the M={draws_m} draws": draws,
             "the flow update at one draw": flow_update}  # fmt: skip
    dominant = max(parts, key=parts.get)

    def pct(ms: float) -> str:
        return f"{100 * ms / extra:.0f}%" if extra > 0 else "-"

    return (
        f"FPO cost = {models['fpo'] / models['ppo']:.2f}x PPO's iteration time (model; measured {ratio:.2f}x): "
        f"+{extra:.1f} ms/iteration = integration K={steps_k} at acting (minus the Gaussian act) "
        f"{integration:.1f} ms ({pct(integration)}) + M={draws_m} draws {draws:.1f} ms ({pct(draws)}: act-time "
        f"loss {draws_act:.1f}, update {beyond} {draws_update:.1f}) + flow update at M=1 vs PPO's "
        f"{flow_update:.1f} ms ({pct(flow_update)}) + rest of acting {rest:.1f} ms ({pct(rest)}); "
        f"dominated by {dominant}"
    )


def iteration_model(t: dict, act, update, horizon: int, updates: int) -> float:
    """Model milliseconds per iteration: T * (act + env.step) + updates * update step."""
    return (horizon * (t[("act", act)] + t["env"]) + updates * t[("update", update)]) / 1e3


@dataclasses.dataclass(frozen=True)
class Shape:
    """What an iteration is made of (the same for both configs): N envs, T steps, update steps, minibatch."""

    num_envs: int
    horizon: int
    updates: int
    epochs: int
    minibatch: int
    steps_k: int  # the FPO config's K and M
    draws_m: int


def component_rows(t: dict, shape: Shape, models: dict, measured: dict, steps, draws) -> list[tuple]:
    """The table's rows: PPO's and FPO's iteration components, then the FPO variants."""
    n, horizon, updates, k, m = shape.num_envs, shape.horizon, shape.updates, shape.steps_k, shape.draws_m
    act_rest = t[("act", k)] - t[("sample", k)] - t[("loss", m)]  # act's own work beyond sample + loss

    def row(label, size, key, calls, config_key):
        return (label, size, t[key], calls, config_key, t[key] * calls / 1e3)

    def other(key):
        return ("  other (measured - model)", "-", None, None, key, 1e3 * measured[key] - models[key])

    def total(key):
        return ("  iteration (measured)", horizon * n, None, 1, key, 1e3 * measured[key])

    mb = shape.minibatch
    rows = [(f"PPO ({PPO_CONFIG.name})", None, None, None, None, None),
            row("  act gaussian", n, ("act", "gaussian"), horizon, "ppo"),
            row("  env.step (native)", n, "env", horizon, "ppo"),
            row("  update step", mb, ("update", "ppo"), updates, "ppo"), other("ppo"), total("ppo"),
            (f"FPO ({FPO_CONFIG.name}: K={k} steps, M={m} draws)", None, None, None, None, None),
            row(f"  act flow K={k} M={m}", n, ("act", k), horizon, "fpo"),
            row(f"    sample (integration) K={k}", n, ("sample", k), horizon, "fpo"),
            row(f"    act-time CFM loss M={m}", n, ("loss", m), horizon, "fpo"),
            ("    rest of act", n, act_rest, horizon, "fpo", act_rest * horizon / 1e3),
            row("  env.step (native)", n, "env", horizon, "fpo"),
            row(f"  update step M={m}", mb, ("update", m), updates, "fpo"), other("fpo"), total("fpo"),
            ("FPO variants (not in the measured iteration)", None, None, None, None, None)]  # fmt: skip
    rows += [row(f"  act flow K={s} M={m}", n, ("act", s), horizon, None) for s in steps if s != k]
    rows += [row(f"  sample (integration) K={s}", n, ("sample", s), horizon, None) for s in steps if s != k]
    rows += [row(f"  act-time CFM loss M={d}", n, ("loss", d), horizon, None) for d in draws if d != m]
    rows += [row(f"  update step M={d}", mb, ("update", d), updates, None) for d in draws if d != m]
    return rows


def print_rates(shape: Shape, models: dict, measured: dict) -> dict[str, tuple[float, float]]:
    """Model and measured ms per iteration and env steps/s for both configs; returns the steps/s pairs."""
    per_iteration = shape.horizon * shape.num_envs
    minibatches = shape.updates // shape.epochs
    print(
        f"\nper iteration: T={shape.horizon} x N={shape.num_envs} = {per_iteration} env steps; {shape.epochs} "
        f"epochs x {minibatches} minibatches of {shape.minibatch} = {shape.updates} update steps"
    )
    print(f"{'':6}{'model ms':>10}{'measured ms':>13}{'model steps/s':>15}{'measured steps/s':>18}")
    rates = {}
    for key in ("ppo", "fpo"):
        model_rate, measured_rate = per_iteration / (models[key] / 1e3), per_iteration / measured[key]
        rates[key] = (model_rate, measured_rate)
        line = f"{key.upper():<6}{models[key]:10.1f}{1e3 * measured[key]:13.1f}{model_rate:15.0f}{measured_rate:18.0f}"
        print(line)
    print(
        f"FPO/PPO env steps/s: model {rates['fpo'][0] / rates['ppo'][0]:.3f}, "
        f"measured {rates['fpo'][1] / rates['ppo'][1]:.3f}"
    )
    return rates


def print_grid(t: dict, shape: Shape, steps: list[int], draws: list[int], ppo_rate: float) -> None:
    """Model FPO env steps/s for every K x M, act = sample_K + loss_M + the configured act's rest."""
    k, m = shape.steps_k, shape.draws_m
    act_rest = t[("act", k)] - t[("sample", k)] - t[("loss", m)]
    print(f"\nmodel FPO env steps/s by integration steps K (rows) x draws M (columns); PPO model {ppo_rate:.0f}")
    print(f"{'K':>4}" + "".join(f"{f'M={d}':>9}" for d in draws))
    for s in steps:
        cells = []
        for d in draws:
            act = t[("sample", s)] + t[("loss", d)] + act_rest
            ms = (shape.horizon * (act + t["env"]) + shape.updates * t[("update", d)]) / 1e3
            cells.append(f"{shape.horizon * shape.num_envs / (ms / 1e3):9.0f}")
        print(f"{s:>4}" + "".join(cells))


def report(t: dict, fpo: OnPolicyLoop, measured: dict, steps: list[int], draws: list[int]) -> None:
    config = fpo.algorithm.config
    shape = Shape(
        fpo.env.num_envs,
        fpo.rollout.num_steps,
        update_count(fpo),
        config.epochs,
        config.minibatch_size,
        fpo.policy.config.steps,
        fpo.policy.config.draws,
    )
    models = {"ppo": iteration_model(t, "gaussian", "ppo", shape.horizon, shape.updates),
              "fpo": iteration_model(t, shape.steps_k, shape.draws_m, shape.horizon, shape.updates)}  # fmt: skip
    print_table(component_rows(t, shape, models, measured, steps, draws), measured)
    rates = print_rates(shape, models, measured)
    print_grid(t, shape, steps, draws, rates["ppo"][0])
    print()
    ratio = measured["fpo"] / measured["ppo"]
    print(cost_line(t, shape.steps_k, shape.draws_m, shape.horizon, shape.updates, models, ratio))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 5, 10], help="flow integration steps K")
    parser.add_argument("--draws", type=int, nargs="+", default=[1, 4, 8], help="FPO draws M per action")
    parser.add_argument("--repeats", type=int, default=100, help="timed calls per component (median)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed calls per component first")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--iterations", type=int, default=3, help="timed loop.iteration() calls per config")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides of both configs")
    tiny = [
        "env.num_envs=8",
        "rollout.num_steps=8",
        "algo.minibatch_size=32",
        "policy.hidden=[32,32]",
        "critic.hidden=[32,32]",
    ]
    smoke = {"steps": [1], "draws": [1], "repeats": 2, "warmup": 1, "iterations": 1, "set": tiny}
    args = parse_smoke_args(parser, smoke=smoke)
    if min(args.steps) < 1 or min(args.draws) < 1:
        parser.error("--steps and --draws must be >= 1")
    if args.repeats < 1 or args.warmup < 0 or args.threads < 1 or args.iterations < 1:
        parser.error("--repeats, --threads and --iterations must be >= 1, --warmup >= 0")
    torch.set_num_threads(args.threads)

    fpo_config = load_config(FPO_CONFIG, args.set)
    steps = sorted({*args.steps, fpo_config.policy.steps})  # the config's K and M are always timed
    draws = sorted({*args.draws, fpo_config.policy.draws})
    loops = {"ppo": build_loop(PPO_CONFIG, args.set)}
    for m in draws:
        loops[("fpo", m)] = build_loop(FPO_CONFIG, [*args.set, f"policy.draws={m}"])
    loops["fpo"] = loops[("fpo", fpo_config.policy.draws)]
    try:
        minibatches = {key: rollout_minibatch(loop) for key, loop in loops.items() if key != "fpo"}
        timings = act_timings(loops["ppo"], loops["fpo"], steps, draws, args)
        timings["env"] = env_micros(loops["ppo"], args.repeats, args.warmup)
        timings[("update", "ppo")] = update_micros(loops["ppo"], minibatches["ppo"], args.repeats, args.warmup)
        for m in draws:
            loop = loops[("fpo", m)]
            timings[("update", m)] = update_micros(loop, minibatches[("fpo", m)], args.repeats, args.warmup)
        measured = {key: measured_seconds(loops[key], args.iterations) for key in ("ppo", "fpo")}
    finally:
        for key, loop in loops.items():
            if key != "fpo":
                loop.env.close()
    print(
        f"torch {torch.__version__}, {args.threads} torch thread(s); median of {args.repeats} calls after "
        f"{args.warmup} warm-up; iterations: mean of {args.iterations} after 1 warm-up"
    )
    report(timings, loops["fpo"], measured, steps, draws)


if __name__ == "__main__":
    main()
