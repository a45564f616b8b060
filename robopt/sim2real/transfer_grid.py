"""The grids and results of ``robopt evaluate-transfer`` (robopt.sim2real.evaluate): axis parsing and checks,
``TransferResult`` (JSON round trip, text table) and its plot. torch-free to import.

Shapes: N episodes per cell, n1 / n2 values on grid axis 1 / 2.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robopt.options import ConfigError

GRID_PARAMS = ("body_mass", "geom_friction", "dof_damping", "actuator_gain")  # robopt.envs.physics.PARAM_NAMES
DISTURBANCES = ("action_delay", "push_force")  # absolute values, nominal 0
GRID_AXES = (*GRID_PARAMS, *DISTURBANCES)
MAX_DELAY = 1000  # robopt.envs.randomization.MAX_DELAY (not imported: this module stays torch-free to import)
MAX_AXES, FORMAT = 2, "robopt-transfer"
JSON_NAME, PNG_NAME = "transfer.json", "transfer.png"
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
            "format": FORMAT,
            "format_version": 1,
            "source": self.source,
            "source_kind": self.source_kind,
            "env_id": self.env_id,
            "episodes": self.episodes,
            "seed": self.seed,
            "axes": [{"name": name, "values": list(values)} for name, values in zip(self.axes, self.values)],
            "returns": self.returns.tolist(),
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "nominal": {
                "mean": self.nominal_return,
                "std": float(np.std(self.nominal_returns)),
                "returns": list(self.nominal_returns),
            },
        }

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
                source=data["source"],
                source_kind=data["source_kind"],
                env_id=data["env_id"],
                episodes=int(data["episodes"]),
                seed=int(data["seed"]),
            )
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
