"""``robopt evaluate-transfer``: a policy's returns over a grid of dynamics (mass, friction, delay, pushes).

Shapes: N episodes (env rows, one deterministic episode each), n1 / n2 values on grid axis 1 / 2, D obs dim, A action
dim. A grid axis ``NAME=LOW:HIGH:COUNT`` scales one model parameter of the native backend by each of
``linspace(LOW, HIGH, COUNT)`` (factors of the nominal values, every element alike; ``body_mass`` scales the
bodies' inertia too, as the domain randomization does). Every cell runs on one reused CPU ``mujoco`` env with
N rows, reset with the same seed, so cells differ only in their dynamics. The cell with every factor 1 is
``evaluate_policy`` on that env; it is what ``robopt eval`` reports (same seed and episodes) only for a run on a
native ``mujoco/<Task>`` id with the CPU ``mujoco`` backend and no randomization: otherwise ``robopt eval`` runs the
run's own env (a Gymnasium id, GPU ``mujoco_warp``, randomized dynamics), which may give other returns.
The env is built from the source's env options without its randomization (no random scales, delays, noise or
pushes), so each cell is one fixed dynamics. Two disturbance axes take absolute values instead of factors (nominal
0): ``action_delay`` (integer control ticks: the action applied at step t is the one given at t - d) and
``push_force`` (Newtons on the root body for ``PUSH_DURATION`` steps, every ``PUSH_INTERVAL`` steps, in a random
horizontal direction drawn from the env's RNG); a cell with either runs on its own env with that fixed
randomization, reset with the same seed: its delay and push schedule are drawn from the env's generator at reset,
so its start states are other draws from the same distribution than the nominal cell's (the same for every policy).
Grid parsing, ``TransferResult`` and the plot live in robopt.sim2real.transfer_grid (re-exported here).

    parse_grid_axis     "NAME=LOW:HIGH:COUNT" -> (NAME, [COUNT factors])
    evaluate_transfer   a run or export directory and a grid -> TransferResult; writes transfer.json, transfer.png
    TransferResult      axes, values, returns [n1, (n2,) N], the nominal cell's; JSON round trip, text table
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from robopt.options import WARP_ONLY_OPTIONS, ConfigError
from robopt.sim2real.transfer_grid import (
    _EXAMPLE,
    GRID_HELP,
    GRID_PARAMS,
    JSON_NAME,
    PNG_NAME,
    TransferResult,
    _nominal_value,
    check_grid,
    parse_grid,
    write_transfer,
)

_DROPPED_ENV_OPTIONS = ("randomization", "seed", *WARP_ONLY_OPTIONS)  # not for a fixed-dynamics CPU env
PUSH_INTERVAL, PUSH_DURATION = 100, 5  # steps between pushes, steps each push lasts (Hopper: 0.8 s and 0.04 s)


class _OnnxActor:
    """An export's ONNX model behind ``act(obs [N, D]) -> (action [N, A], {})`` as ``evaluate_policy`` calls it; a
    model with memory (the sidecar's ``state_dim`` M) is a recurrent policy instead, whose state ``PolicyActor``
    carries row by row and zeroes where an episode starts, as the deploy runtime does at a reported boundary."""

    def __init__(self, model) -> None:
        self.model = model

    def initial_state(self, n: int):
        import torch

        return torch.zeros(n, self.model.state_dim)

    def step(self, obs, state, episode_start, deterministic: bool = True):
        """obs [N, D], state [N, M], episode_start [N] -> (action [N, A], {}, next state [N, M])."""
        import torch

        state = torch.where(episode_start[:, None].to(state.device), torch.zeros_like(state), state)
        action, next_state = self.model.step(
            obs.detach().cpu().numpy().astype(np.float32), state.cpu().numpy().astype(np.float32)
        )
        return torch.from_numpy(action).to(obs.device), {}, torch.from_numpy(next_state)

    def act(self, obs, deterministic: bool = True):
        import torch

        action = self.model.batch(obs.detach().cpu().numpy().astype(np.float32))
        if action.ndim == 3:  # an action chunk [N, H, A]: its first action, replanned every step
            action = action[:, 0]
        return torch.from_numpy(np.ascontiguousarray(action)).to(obs.device), {}


class _FirstOfChunk:
    """A chunked run policy (flat [N, H * A] actions) replanned every step, as an export's chunk is above."""

    def __init__(self, policy, horizon: int) -> None:
        self.policy, self.horizon = policy, horizon

    def act(self, obs, deterministic: bool = True):
        action, _ = self.policy.act(obs, deterministic=deterministic)
        return action[:, : action.shape[1] // self.horizon], {}


def native_twin(env_id: str) -> str:
    """``env_id`` itself when it is a native ``mujoco/<Task>``, else the native task reproducing it; ConfigError."""
    from robopt.envs.registry import NATIVE_TASKS, ROBOT_ENV_ID, list_env_ids

    list_env_ids()  # registers the native tasks
    if env_id in NATIVE_TASKS or env_id == ROBOT_ENV_ID:  # a robot from its description is native too
        return env_id
    for native_id, task in sorted(NATIVE_TASKS.items()):
        if task.gymnasium_id == env_id:
            return native_id
    twins = ", ".join(sorted(t.gymnasium_id for t in NATIVE_TASKS.values() if t.gymnasium_id))
    raise ConfigError(
        f"evaluate-transfer needs a native MuJoCo task (mujoco/<Task>) or a Gymnasium id with a native twin; "
        f"{env_id!r} has none (twins exist for {twins})"
    )


def _load_source(source: Path):
    """(kind, native env id, env options, actor, the run's config or None) of a run or an export directory."""
    from robopt.sim2real.sidecar import SIDECAR_NAME, DeployError, read_sidecar

    if (source / SIDECAR_NAME).is_file():
        from robopt.sim2real.model import load_export

        try:
            env_id = native_twin(read_sidecar(source).env_id)
            sidecar, model = load_export(source)
        except DeployError as error:
            raise ConfigError(str(error)) from None
        _check_raw_observation(sidecar.config)
        env_options = dict((sidecar.config.get("env") or {}).get("kwargs") or {})
        if env_id == "robot":  # the robot and its task, from the run's config in the sidecar
            env_options.update(robot=sidecar.config.get("robot"), task=sidecar.config.get("task"))
        return "export", env_id, env_options, _OnnxActor(model), None
    if (source / "config.yaml").is_file():
        from dataclasses import replace

        from robopt.build import available_device, section_env_options
        from robopt.evaluation import load_policy
        from robopt.experiment import load_run_config

        config = load_run_config(source)  # its observation selection and history window: ``policy_view``
        env_id = native_twin(config.env.id)
        _, policy = load_policy(source, replace(config, device=str(available_device(config.device))))
        horizon = getattr(config.policy, "horizon", 1)
        actor = policy.cpu() if horizon == 1 else _FirstOfChunk(policy.cpu(), horizon)
        return "run", env_id, {**config.env.kwargs, **section_env_options(config)}, actor, config
    raise ConfigError(
        f"{str(source)!r} is neither a run directory (config.yaml) nor an export directory ({SIDECAR_NAME})"
    )


def _check_raw_observation(config: dict) -> None:
    """A one-line ConfigError for an export that does not act on the native env's full observation (an observation
    history window, ``env.observe``): its ONNX model is run on the raw native env (a run directory is wrapped as it
    trained, ``policy_view``)."""
    history = int((config.get("policy") or {}).get("history", 1))
    observe = list((config.get("env") or {}).get("observe") or [])
    if history > 1 or observe:
        what = f"policy.history={history}" if history > 1 else f"env.observe={observe}"
        raise ConfigError(
            f"evaluate-transfer runs an export on the native env's full observation; an export with "
            f"{what} is not supported there: give its run directory"
        )


def _cell_params(nominal: dict, factors: dict[str, float], num_envs: int) -> dict:
    """Absolute parameters [N, ...] of every grid parameter for these factors: body_inertia follows body_mass, and a
    servo's bias (its kp and kd) follows actuator_gain, as the randomization's motor strength does."""
    follows = {"body_inertia": "body_mass", "actuator_bias": "actuator_gain"}
    names = [*GRID_PARAMS, *(name for name in follows if name in nominal)]
    params = {}
    for name in names:
        factor = factors.get(follows.get(name, name), 1.0)
        value = nominal[name] * factor
        params[name] = value.expand(num_envs, *value.shape).clone()
    return params


def _disturbance_options(delay: int, force: float) -> dict:
    """env options for a cell's fixed actuator delay and push magnitude (none when both are 0)."""
    randomization: dict = {}
    if delay > 0:
        randomization["action_delay"] = [delay, delay]
    if force > 0:
        randomization.update(
            push_force=[force, force], push_interval=[PUSH_INTERVAL, PUSH_INTERVAL], push_duration=PUSH_DURATION
        )
    return {"randomization": randomization} if randomization else {}


def _returns_at(env, actor, nominal: dict, factors: dict[str, float], episodes: int, seed: int) -> list[float]:
    """Returns [N] of one deterministic episode per row with the model parameters scaled by ``factors``; ``env`` is
    (the native env, what the policy sees of it: the same env, or its observation selection and history window).

    The parameters are the rows' base values (``set_model_params``), applied at the reset ``evaluate_policy`` does
    with ``seed``; with no randomization that reset draws nothing else, so every cell starts from the same states.
    """
    import torch

    from robopt.evaluation import evaluate_policy

    raw, policy_env = env
    raw.set_model_params(_cell_params(nominal, factors, raw.num_envs), torch.arange(raw.num_envs))
    return evaluate_policy(actor, policy_env, episodes, seed).returns  # resets every row with ``seed`` first


def evaluate_transfer(
    source: Path, grid: dict[str, list[float]], episodes: int = 10, seed: int = 0, out: Path | None = None
) -> TransferResult:
    """Returns of the source's policy on every cell of ``grid`` ({parameter: factors}, one or two axes).

    ``source`` is a run directory (the torch policy of its last checkpoint) or an export directory (policy.onnx
    through ONNX Runtime). Writes transfer.json and transfer.png into ``out`` (default SOURCE/transfer).
    ConfigError (one line) on bad input.
    """
    from robopt.build import policy_view
    from robopt.envs.registry import make_env

    source, grid = Path(source), check_grid(grid)
    out = source / "transfer" if out is None else Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} exists and is not a directory")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"--episodes must be an integer of at least 1, got {episodes!r}")
    kind, env_id, env_options, actor, run_config = _load_source(source)
    env_options = {k: v for k, v in env_options.items() if k not in _DROPPED_ENV_OPTIONS}
    envs: dict[tuple[int, float], object] = {}  # (delay, push force) -> its env

    def env_for(cell: dict[str, float]):
        key = (int(cell.get("action_delay", 0)), float(cell.get("push_force", 0.0)))
        if key not in envs:
            try:
                raw = make_env(
                    env_id, episodes, backend="mujoco", device="cpu", **env_options, **_disturbance_options(*key)
                )
            except (ValueError, TypeError) as error:
                raise ConfigError(f"env {env_id!r}: {error}") from None
            envs[key] = (raw, raw if run_config is None else policy_view(run_config, raw))
        return envs[key]

    axes, values = tuple(grid), tuple(tuple(v) for v in grid.values())
    try:
        nominal = env_for({})[0].physics.nominal_params()
        products = list(itertools.product(*values))  # row-major over [n1, (n2)]; a value may repeat
        cells = []
        for point in products:
            cell = dict(zip(axes, point))
            cells.append(_returns_at(env_for(cell), actor, nominal, cell, episodes, seed))
        ones = tuple(_nominal_value(name) for name in axes)
        if ones in products:
            nominal_returns = cells[products.index(ones)]
        else:
            nominal_returns = _returns_at(env_for({}), actor, nominal, {}, episodes, seed)
    finally:
        for raw, _ in envs.values():
            raw.close()
    shape = (*(len(v) for v in values), episodes)
    returns = np.asarray(cells, dtype=np.float64).reshape(shape)
    result = TransferResult(axes, values, returns, list(nominal_returns), str(source), kind, env_id, episodes, seed)
    write_transfer(result, out)
    return result


def register(app, fail) -> None:
    """Add ``robopt evaluate-transfer RUN_OR_EXPORT --grid NAME=LOW:HIGH:COUNT ...`` to ``app``."""
    import typer

    @app.command("evaluate-transfer")
    def evaluate_transfer_command(
        source: Path = typer.Argument(
            ..., metavar="RUN_OR_EXPORT", help="run directory or export directory (policy.json + policy.onnx)"
        ),
        grid: list[str] | None = typer.Option(None, "--grid", help=GRID_HELP),
        episodes: int = typer.Option(10, "--episodes", help="episodes (env rows) per grid cell"),
        seed: int = typer.Option(0, "--seed", help="reset seed, the same for every cell"),
        out: Path | None = typer.Option(None, "--out", help="output directory (default RUN_OR_EXPORT/transfer)"),
    ) -> None:
        """Returns of the policy over a grid of dynamics (mass, friction, damping, motor gain, delay, pushes)."""
        try:
            if not grid:
                raise ConfigError(f"give one or two --grid NAME=LOW:HIGH:COUNT axes, {_EXAMPLE}")
            axes = parse_grid(grid)
            if episodes < 1:
                raise ConfigError(f"--episodes must be at least 1, got {episodes}")
            out_dir = Path(source) / "transfer" if out is None else out
            result = evaluate_transfer(source, axes, episodes, seed, out_dir)
        except (ConfigError, ValueError) as error:
            fail(str(error))
        typer.echo(result.table())
        typer.echo(f"wrote {out_dir / JSON_NAME} and {out_dir / PNG_NAME}")
