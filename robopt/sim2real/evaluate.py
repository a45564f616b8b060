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
    parse_grid_axis     "NAME=LOW:HIGH:COUNT" -> (NAME, [COUNT factors])
    evaluate_transfer   a run or export directory and a grid -> TransferResult; writes transfer.json, transfer.png
    TransferResult      axes, values, returns [n1, (n2,) N], the nominal cell's; JSON round trip, text table
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robopt.options import WARP_ONLY_OPTIONS, ConfigError

GRID_PARAMS = ("body_mass", "geom_friction", "dof_damping", "actuator_gain")  # robopt.envs.physics.PARAM_NAMES
DISTURBANCES = ("action_delay", "push_force")  # absolute values, nominal 0
GRID_AXES = (*GRID_PARAMS, *DISTURBANCES)
PUSH_INTERVAL, PUSH_DURATION = 100, 5  # steps between pushes, steps each push lasts (Hopper: 0.8 s and 0.04 s)
MAX_DELAY = 1000  # robopt.envs.randomization.MAX_DELAY (not imported: this module stays torch-free to import)
MAX_AXES, FORMAT = 2, "robopt-transfer"
JSON_NAME, PNG_NAME = "transfer.json", "transfer.png"
_DROPPED_ENV_OPTIONS = ("randomization", "seed", *WARP_ONLY_OPTIONS)  # not for a fixed-dynamics CPU env
_EXAMPLE = "e.g. body_mass=0.5:1.5:5 or action_delay=0:2:3"
GRID_HELP = (
    f"NAME=LOW:HIGH:COUNT: COUNT scale factors of a model parameter ({', '.join(GRID_PARAMS)}), or COUNT values of "
    f"a disturbance (action_delay in control ticks, push_force in Newtons); once or twice"
)


def _check_axis(label: str, name: str, values: list[float]) -> list[float]:
    """The axis' values as floats; ConfigError naming ``label`` unless they suit ``name``."""
    if name not in GRID_AXES:
        raise ConfigError(f"{label}: unknown grid axis {name!r}; allowed: {', '.join(GRID_AXES)}")
    if name in GRID_PARAMS:
        if not values or not all(math.isfinite(v) and v > 0 for v in values):
            raise ConfigError(f"{label}: need finite scale factors > 0 (of the nominal values), got {values!r:.80}")
    elif name == "push_force":
        if not values or not all(math.isfinite(v) and v >= 0 for v in values):
            raise ConfigError(f"{label}: need push forces >= 0 Newtons, got {values!r:.80}")
    elif not values or not all(math.isfinite(v) and v == int(v) and 0 <= v <= MAX_DELAY for v in values):
        raise ConfigError(f"{label}: need whole control ticks 0..{MAX_DELAY} (LOW, HIGH, COUNT giving integers)")
    return [float(v) for v in values]


def _nominal_value(name: str) -> float:
    return 0.0 if name in DISTURBANCES else 1.0


def parse_grid_axis(text: str) -> tuple[str, list[float]]:
    """``NAME=LOW:HIGH:COUNT`` -> (NAME, linspace(LOW, HIGH, COUNT)); ConfigError (one line) on bad input."""
    name, sep, spec = text.partition("=")
    name, parts = name.strip(), spec.split(":")
    if not sep or not name or len(parts) != 3:
        raise ConfigError(f"--grid {text!r}: need NAME=LOW:HIGH:COUNT, {_EXAMPLE}")
    if name not in GRID_AXES:
        raise ConfigError(f"--grid {text!r}: unknown grid axis {name!r}; allowed: {', '.join(GRID_AXES)}")
    try:
        low, high, count = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise ConfigError(f"--grid {text!r}: LOW and HIGH must be numbers and COUNT an integer, {_EXAMPLE}") from None
    if count < 1:
        raise ConfigError(f"--grid {text!r}: COUNT must be at least 1, got {count}")
    if name in GRID_PARAMS and not (math.isfinite(low) and math.isfinite(high) and 0.0 < low <= high):
        raise ConfigError(f"--grid {text!r}: need 0 < LOW <= HIGH (scale factors of the nominal values)")
    if name in DISTURBANCES and not (math.isfinite(low) and math.isfinite(high) and 0.0 <= low <= high):
        raise ConfigError(f"--grid {text!r}: need 0 <= LOW <= HIGH")
    if low == high and count > 1:
        raise ConfigError(f"--grid {text!r}: LOW == HIGH gives one value; use COUNT 1 or LOW < HIGH")
    values = np.linspace(low, high, count).tolist()
    if name == "action_delay":
        values = [round(v, 9) for v in values]
    return name, _check_axis(f"--grid {text!r}", name, values)


def parse_grid(texts: list[str]) -> dict[str, list[float]]:
    """The ``--grid`` options (one or two axes, each parameter once) as {name: factors}."""
    grid: dict[str, list[float]] = {}
    for text in texts:
        name, values = parse_grid_axis(text)
        if name in grid:
            raise ConfigError(f"--grid {name} is given twice; give each parameter once")
        grid[name] = values
    check_grid(grid)
    return grid


def check_grid(grid: dict[str, list[float]]) -> dict[str, list[float]]:
    """The grid with float factors after checking 1-2 known axes of finite factors > 0; ConfigError otherwise."""
    if not 1 <= len(grid) <= MAX_AXES:
        given = ", ".join(grid) or "none"
        raise ConfigError(f"evaluate-transfer takes one or two --grid axes, got {len(grid)} ({given})")
    checked = {}
    for name, values in grid.items():
        try:
            numbers = [float(v) for v in values]
        except (TypeError, ValueError):
            raise ConfigError(f"grid axis {name}: values must be numbers, got {values!r:.80}") from None
        checked[name] = _check_axis(f"grid axis {name}", name, numbers)
    return checked


@dataclass(frozen=True, eq=False)
class TransferResult:
    axes: tuple[str, ...]
    values: tuple[tuple[float, ...], ...]  # the factors of each axis
    returns: np.ndarray  # [n1, N] or [n1, n2, N] episode returns per cell
    nominal_returns: list[float]  # [N] every factor 1, no delay or push (``robopt eval``'s on CPU mujoco)
    source: str
    source_kind: str  # "run" or "export"
    env_id: str  # the native task evaluated (the source's own id, or its native twin)
    episodes: int
    seed: int

    @property
    def mean(self) -> np.ndarray:
        """[n1] or [n1, n2] mean return per cell."""
        return self.returns.mean(-1)

    @property
    def std(self) -> np.ndarray:
        """[n1] or [n1, n2] standard deviation of the returns per cell (population, as ``evaluate_policy``)."""
        return self.returns.std(-1)

    @property
    def nominal_return(self) -> float:
        return float(np.mean(self.nominal_returns))

    def to_dict(self) -> dict:
        return {
            "format": FORMAT, "format_version": 1, "source": self.source, "source_kind": self.source_kind,
            "env_id": self.env_id, "episodes": self.episodes, "seed": self.seed,
            "axes": [{"name": name, "values": list(values)} for name, values in zip(self.axes, self.values)],
            "returns": self.returns.tolist(), "mean": self.mean.tolist(), "std": self.std.tolist(),
            "nominal": {"mean": self.nominal_return, "std": float(np.std(self.nominal_returns)),
                        "returns": list(self.nominal_returns)},
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict) -> TransferResult:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ConfigError(f"not a {FORMAT} result (transfer.json)")
        try:
            return cls(
                axes=tuple(axis["name"] for axis in data["axes"]),
                values=tuple(tuple(float(v) for v in axis["values"]) for axis in data["axes"]),
                returns=np.asarray(data["returns"], dtype=np.float64),
                nominal_returns=[float(v) for v in data["nominal"]["returns"]],
                source=data["source"], source_kind=data["source_kind"], env_id=data["env_id"],
                episodes=int(data["episodes"]), seed=int(data["seed"]),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigError(f"transfer.json is incomplete or malformed ({type(error).__name__}: {error})") from None

    @classmethod
    def load(cls, path: Path) -> TransferResult:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError) as error:
            raise ConfigError(f"cannot read {str(path)!r}: {error}") from None

    def table(self) -> str:
        """Rows: axis 1 factors; columns: axis 2 factors (or the return); cells "mean +- std"."""
        cell = np.vectorize(lambda m, s: f"{m:.2f} +- {s:.2f}", otypes=[object])(self.mean, self.std)
        if len(self.axes) == 1:
            header, rows = [self.axes[0], "return"], [[f"{v:g}", c] for v, c in zip(self.values[0], cell)]
        else:
            header = [f"{self.axes[0]} \\ {self.axes[1]}", *(f"{v:g}" for v in self.values[1])]
            rows = [[f"{v:g}", *row] for v, row in zip(self.values[0], cell)]
        widths = [max(len(str(line[i])) for line in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(str(text).rjust(width) for text, width in zip(line, widths)) for line in [header, *rows]]
        spread = float(np.std(self.nominal_returns))
        nominal = f"nominal (every factor 1, no delay or push): {self.nominal_return:.2f} +- {spread:.2f}"
        return "\n".join([f"{self.env_id}: return over {self.episodes} episodes (seed {self.seed})", *lines, nominal])


class _OnnxActor:
    """An export's ONNX model behind ``act(obs [N, D]) -> (action [N, A], {})`` as ``evaluate_policy`` calls it."""

    def __init__(self, model) -> None:
        self.model = model

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
    from robopt.envs.registry import NATIVE_TASKS, list_env_ids

    list_env_ids()  # registers the native tasks
    if env_id in NATIVE_TASKS:
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
    """(kind, native env id, env options, actor) of a run directory or an export directory."""
    from robopt.sim2real.sidecar import SIDECAR_NAME, DeployError, read_sidecar

    if (source / SIDECAR_NAME).is_file():
        from robopt.sim2real.runtime import load_export

        try:
            env_id = native_twin(read_sidecar(source).env_id)
            sidecar, model = load_export(source)
        except DeployError as error:
            raise ConfigError(str(error)) from None
        env_options = dict((sidecar.config.get("env") or {}).get("kwargs") or {})
        return "export", env_id, env_options, _OnnxActor(model)
    if (source / "config.yaml").is_file():
        from dataclasses import replace

        from robopt.build import available_device
        from robopt.evaluation import load_policy
        from robopt.experiment import load_run_config

        config = load_run_config(source)
        env_id = native_twin(config.env.id)
        _, policy = load_policy(source, replace(config, device=str(available_device(config.device))))
        horizon = getattr(config.policy, "horizon", 1)
        actor = policy.cpu() if horizon == 1 else _FirstOfChunk(policy.cpu(), horizon)
        return "run", env_id, dict(config.env.kwargs), actor
    raise ConfigError(
        f"{str(source)!r} is neither a run directory (config.yaml) nor an export directory ({SIDECAR_NAME})"
    )


def _cell_params(nominal: dict, factors: dict[str, float], num_envs: int) -> dict:
    """Absolute parameters [N, ...] of every grid parameter (and body_inertia with body_mass) for these factors."""
    names = [*GRID_PARAMS, "body_inertia"] if "body_inertia" in nominal else list(GRID_PARAMS)
    params = {}
    for name in names:
        factor = factors.get("body_mass" if name == "body_inertia" else name, 1.0)
        value = nominal[name] * factor
        params[name] = value.expand(num_envs, *value.shape).clone()
    return params


def _disturbance_options(delay: int, force: float) -> dict:
    """env options for a cell's fixed actuator delay and push magnitude (none when both are 0)."""
    randomization: dict = {}
    if delay > 0:
        randomization["action_delay"] = [delay, delay]
    if force > 0:
        randomization.update(push_force=[force, force], push_interval=[PUSH_INTERVAL, PUSH_INTERVAL],
                             push_duration=PUSH_DURATION)  # fmt: skip
    return {"randomization": randomization} if randomization else {}


def _returns_at(env, actor, nominal: dict, factors: dict[str, float], episodes: int, seed: int) -> list[float]:
    """Returns [N] of one deterministic episode per row with the model parameters scaled by ``factors``.

    The parameters are the rows' base values (``set_model_params``), applied at the reset ``evaluate_policy`` does
    with ``seed``; with no randomization that reset draws nothing else, so every cell starts from the same states.
    """
    import torch

    from robopt.evaluation import evaluate_policy

    env.set_model_params(_cell_params(nominal, factors, env.num_envs), torch.arange(env.num_envs))
    return evaluate_policy(actor, env, episodes, seed).returns  # resets every row with ``seed`` first


def evaluate_transfer(
    source: Path, grid: dict[str, list[float]], episodes: int = 10, seed: int = 0, out: Path | None = None
) -> TransferResult:
    """Returns of the source's policy on every cell of ``grid`` ({parameter: factors}, one or two axes).

    ``source`` is a run directory (the torch policy of its last checkpoint) or an export directory (policy.onnx
    through ONNX Runtime). Writes transfer.json and transfer.png into ``out`` (default SOURCE/transfer).
    ConfigError (one line) on bad input.
    """
    from robopt.envs.registry import make_env

    source, grid = Path(source), check_grid(grid)
    out = source / "transfer" if out is None else Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} exists and is not a directory")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise ConfigError(f"--episodes must be an integer of at least 1, got {episodes!r}")
    kind, env_id, env_options, actor = _load_source(source)
    env_options = {k: v for k, v in env_options.items() if k not in _DROPPED_ENV_OPTIONS}
    envs: dict[tuple[int, float], object] = {}  # (delay, push force) -> its env

    def env_for(cell: dict[str, float]):
        key = (int(cell.get("action_delay", 0)), float(cell.get("push_force", 0.0)))
        if key not in envs:
            try:
                envs[key] = make_env(env_id, episodes, backend="mujoco", device="cpu", **env_options,
                                     **_disturbance_options(*key))  # fmt: skip
            except (ValueError, TypeError) as error:
                raise ConfigError(f"env {env_id!r}: {error}") from None
        return envs[key]

    axes, values = tuple(grid), tuple(tuple(v) for v in grid.values())
    try:
        nominal = env_for({}).physics.nominal_params()
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
        for env in envs.values():
            env.close()
    shape = (*(len(v) for v in values), episodes)
    returns = np.asarray(cells, dtype=np.float64).reshape(shape)
    result = TransferResult(axes, values, returns, list(nominal_returns), str(source), kind, env_id, episodes, seed)
    write_transfer(result, out)
    return result


def _axis_label(name: str) -> str:
    return {"action_delay": "action_delay (control ticks)", "push_force": "push_force (N)"}.get(name, f"{name} scale")


def write_transfer(result: TransferResult, out: Path) -> tuple[Path, Path]:
    """transfer.json and transfer.png (heatmap for two axes, mean with a std band for one) in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out / JSON_NAME, out / PNG_NAME
    json_path.write_text(json.dumps(result.to_dict(), indent=2))
    mean, std = result.mean, result.std
    figure, axis = plt.subplots(figsize=(7, 4.5))
    if len(result.axes) == 1:
        x = np.asarray(result.values[0])
        (line,) = axis.plot(x, mean, marker="o", label="mean return")
        axis.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2, label="+- std")
        axis.axvline(_nominal_value(result.axes[0]), color="grey", linestyle=":", label="nominal")
        axis.set_xlabel(_axis_label(result.axes[0]))
        axis.set_ylabel("return")
        axis.grid(alpha=0.3)
        axis.legend()
    else:
        image = axis.imshow(mean, origin="lower", aspect="auto", cmap="viridis")
        middle = (np.nanmin(mean) + np.nanmax(mean)) / 2
        for (i, j), value in np.ndenumerate(mean):
            color = "black" if value > middle else "white"  # readable on viridis' light and dark ends
            axis.text(j, i, f"{value:.1f}\n+-{std[i, j]:.1f}", ha="center", va="center", fontsize=8, color=color)
        axis.set_xticks(range(len(result.values[1])), [f"{v:g}" for v in result.values[1]])
        axis.set_yticks(range(len(result.values[0])), [f"{v:g}" for v in result.values[0]])
        axis.set_xlabel(_axis_label(result.axes[1]))
        axis.set_ylabel(_axis_label(result.axes[0]))
        figure.colorbar(image, ax=axis, label="mean return")
    axis.set_title(f"{result.env_id}: {result.episodes} episodes per cell (seed {result.seed})")
    figure.tight_layout()
    figure.savefig(png_path, dpi=120)
    plt.close(figure)
    return json_path, png_path


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
