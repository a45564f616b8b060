"""``policy.json``: what a deploy runtime must know about an exported policy, written next to the model files.

Torch-free (stdlib only). Fields (format_version 2; version 1 files, without ``robot``, are read as before):
    format             "robopt-policy"
    format_version     1
    robopt_version     the package version that exported it
    policy_kind        "gaussian", "flow", ...
    env_id             the training env id
    obs_dim, action_dim
    obs_names, action_names   lists of names, or null where the env does not name them
    obs_low, obs_high         declared observation bounds (lists) or null (unbounded)
    action_low, action_high   action bounds (lists); the exported model already clamps or squashes into them
    control_period     seconds per control tick (the env's dt)
    action_chunk       H actions per model call (1: one action; the model's output is [B, H, A] when H > 1)
    files              {"onnx": "policy.onnx", "pt2": "policy.pt2"}: the formats present (MODEL_FORMATS; exports
                       before pt2 hold "torchscript": "policy.pt", still read)
    files_sha256       {file name: sha256 hex} of each model file
    weights_sha256     sha256 of the policy weights (state dict tensors in key order)
    onnx_input, onnx_output   tensor names in the ONNX graph ("obs" [B, obs_dim] float32 -> "action")
    config             the run's resolved config (a dict)
    robot              a robot from its description (env.id: robot): joint names in action order, the action's
                       scale and offset, default pose, PD gains, effort limits, joint ranges, control period,
                       observation terms in order (widths, scales, clips, history) and the command's ranges
                       (robopt.envs.robot.describe); null for other envs
    state_dim          M > 0: a policy with memory (format_version 3, so that a runtime that cannot carry state
                       refuses it): the model also takes "state" [B, M] (onnx_state_input) and returns "next_state"
                       [B, M] (onnx_state_output); zeros at an episode start. 0: a memoryless policy
    history            an observation history (``policy.history`` K > 1; robopt.envs.history): {"frames": K,
                       "obs_dim": D, "action_dim": A, "layout": HISTORY_LAYOUT}; the model's input (obs_dim, obs_low,
                       obs_high, obs_names) is then the window K * (D + A) while the robot sends raw observations [D]
                       (``robot_obs_dim``); null without one (and in files written before it existed)
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORMAT, FORMAT_VERSION, SIDECAR_NAME = "robopt-policy", 2, "policy.json"
READABLE_VERSIONS = (1, 2, 3)  # version 2 added ``robot``; 3 is a policy with memory (``state_dim`` > 0)
HISTORY_LAYOUT = "frames oldest first: [obs, previous action]"  # robopt.envs.history.LAYOUT
# "pt2": a torch.export ExportedProgram; "torchscript": torch.jit.trace, written by exports before pt2 (read only)
MODEL_FORMATS = ("onnx", "pt2", "torchscript")


class DeployError(ValueError):
    """Bad export directory, sidecar or deploy config: a one-line message naming the problem."""


@dataclass(frozen=True)
class Sidecar:
    policy_kind: str
    env_id: str
    obs_dim: int
    action_dim: int
    action_low: list[float]
    action_high: list[float]
    control_period: float
    files: dict[str, str]
    action_chunk: int = 1
    obs_names: list[str] | None = None
    action_names: list[str] | None = None
    obs_low: list[float] | None = None
    obs_high: list[float] | None = None
    files_sha256: dict[str, str] = field(default_factory=dict)
    weights_sha256: str = ""
    onnx_input: str = "obs"
    onnx_output: str = "action"
    robopt_version: str = ""
    config: dict = field(default_factory=dict)
    robot: dict | None = None
    state_dim: int = 0
    onnx_state_input: str = "state"
    onnx_state_output: str = "next_state"
    history: dict | None = None
    format: str = FORMAT
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        check_sidecar(self)

    @property
    def robot_obs_dim(self) -> int:
        """D of the observation the robot sends: ``history["obs_dim"]`` with an observation history, else obs_dim."""
        return self.history["obs_dim"] if self.history is not None else self.obs_dim

    @property
    def robot_obs_bounds(self) -> tuple[list[float] | None, list[float] | None]:
        """Declared bounds [D] of the observation the robot sends: obs_low/obs_high, or with a history the first
        frame's obs part of the window's bounds (every frame declares the same)."""
        if self.history is None:
            return self.obs_low, self.obs_high
        dim = self.history["obs_dim"]
        return (None if self.obs_low is None else self.obs_low[:dim]), (
            None if self.obs_high is None else self.obs_high[:dim]
        )


def _fail(message: str) -> None:
    raise DeployError(f"policy.json: {message}")


def _is_number(value) -> bool:
    """An int or float that is not NaN and fits a float (JSON may hold an integer of any size)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return not math.isnan(float(value))
    except OverflowError:
        return False


def _check_vector(name: str, value, size: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, list) or len(value) != size:
        _fail(f"{name} must be a list of {size} numbers, got {value!r:.80}")
    if not all(_is_number(v) for v in value):
        _fail(f"{name} must hold numbers (no NaN), got {value!r:.80}")


def _plain_file_name(name) -> bool:
    """A file name inside the export directory: a non-empty string with no path separator, not '.' or '..'."""
    return isinstance(name, str) and name not in ("", ".", "..") and not any(c in name for c in "/\\\0")


def _check_types(s: Sidecar) -> None:
    """The JSON types of the fields the runtime uses as strings, names, file names and mappings."""
    for name in (
        "policy_kind",
        "env_id",
        "onnx_input",
        "onnx_output",
        "weights_sha256",
        "robopt_version",
        "onnx_state_input",
        "onnx_state_output",
    ):
        if not isinstance(getattr(s, name), str):
            _fail(f"{name} must be a string, got {getattr(s, name)!r:.80}")
    for name in ("obs_names", "action_names"):
        names = getattr(s, name)
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            _fail(f"{name} must be null or a list of strings, got {names!r:.80}")
    if not isinstance(s.config, dict):
        _fail(f"config must be an object (the run's config), got {s.config!r:.80}")
    if not isinstance(s.files, dict) or not all(_plain_file_name(v) for v in s.files.values()):
        _fail(f"files must map formats to plain file names in the export directory (no path), got {s.files!r:.80}")
    hashes = s.files_sha256
    if not isinstance(hashes, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()):
        _fail(f"files_sha256 must map file names to sha256 hex strings, got {hashes!r:.80}")


def check_sidecar(s: Sidecar) -> None:
    """Raise DeployError naming the first inconsistent field."""
    if s.format != FORMAT or s.format_version not in READABLE_VERSIONS:
        versions = " or ".join(str(v) for v in READABLE_VERSIONS)
        _fail(f"format {s.format!r} version {s.format_version!r} is not {FORMAT!r} version {versions}")
    if s.robot is not None and not isinstance(s.robot, dict):
        _fail(f"robot must be null or an object, got {s.robot!r:.80}")
    _check_types(s)
    if not isinstance(s.state_dim, int) or isinstance(s.state_dim, bool) or s.state_dim < 0:
        _fail(f"state_dim must be an integer >= 0, got {s.state_dim!r}")
    if (s.state_dim > 0) != (s.format_version == 3):
        _fail(
            f"state_dim {s.state_dim} with format_version {s.format_version}: a policy with memory is version 3, "
            "and only it"
        )
    if s.state_dim > 0 and s.action_chunk != 1:
        _fail("a policy with memory (state_dim > 0) acts one action per call: action_chunk must be 1")
    for name in ("obs_dim", "action_dim", "action_chunk"):
        value = getattr(s, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            _fail(f"{name} must be an integer >= 1, got {value!r}")
    _check_vector("action_low", s.action_low, s.action_dim)
    _check_vector("action_high", s.action_high, s.action_dim)
    if not all(math.isfinite(lo) and math.isfinite(hi) and lo <= hi for lo, hi in zip(s.action_low, s.action_high)):
        _fail("action bounds must be finite with action_low <= action_high")
    _check_vector("obs_low", s.obs_low, s.obs_dim, optional=True)
    _check_vector("obs_high", s.obs_high, s.obs_dim, optional=True)
    for name, size in (("obs_names", s.obs_dim), ("action_names", s.action_dim)):
        names = getattr(s, name)
        if names is not None and (not isinstance(names, list) or len(names) != size):
            _fail(f"{name} must be null or a list of {size} names")
    period = s.control_period
    if not isinstance(period, (int, float)) or isinstance(period, bool) or not 0.0 < period < math.inf:
        _fail(f"control_period must be a positive number of seconds, got {period!r}")
    if not isinstance(s.files, dict) or not s.files or not set(s.files) <= set(MODEL_FORMATS):
        _fail(f"files must map some of {', '.join(MODEL_FORMATS)} to file names, got {s.files!r}")
    if s.history is not None:
        _check_history(s)


def _check_history(s: Sidecar) -> None:
    """The history block: frames, obs_dim (D) and action_dim (A) integers >= 1 whose window K * (D + A) is
    obs_dim, action_dim the sidecar's, the one layout, and no action chunk."""
    history = s.history
    keys = {"frames", "obs_dim", "action_dim", "layout"}
    if not isinstance(history, dict) or set(history) != keys:
        _fail(f"history must be null or an object with keys {sorted(keys)}, got {history!r:.120}")
    for name in ("frames", "obs_dim", "action_dim"):
        value = history[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            _fail(f"history.{name} must be an integer >= 1, got {value!r}")
    frames, obs_dim, action_dim = history["frames"], history["obs_dim"], history["action_dim"]
    if history["layout"] != HISTORY_LAYOUT:
        _fail(f"history.layout {history['layout']!r:.80} is not the one this runtime reads ({HISTORY_LAYOUT!r})")
    if action_dim != s.action_dim or frames * (obs_dim + action_dim) != s.obs_dim:
        window = frames * (obs_dim + action_dim)
        _fail(
            f"history of {frames} frames of obs_dim {obs_dim}, action_dim {action_dim} needs obs_dim {window} and "
            f"action_dim {action_dim}, got {s.obs_dim} and {s.action_dim}"
        )
    if s.action_chunk != 1:
        _fail(f"history needs action_chunk 1 (one action per control tick), got {s.action_chunk}")


def write_sidecar(directory: Path, sidecar: Sidecar) -> Path:
    path = Path(directory) / SIDECAR_NAME
    data = asdict(sidecar)
    if data["history"] is None:  # written only when present: a runtime from before the field still reads the file
        del data["history"]
    if data["state_dim"] == 0:  # likewise the state of a policy with memory (format_version 3 when present)
        for name in ("state_dim", "onnx_state_input", "onnx_state_output"):
            del data[name]
    path.write_text(json.dumps(data, indent=2, sort_keys=True))
    return path


def read_sidecar(directory: Path) -> Sidecar:
    """The checked sidecar of an export directory; DeployError (one line) when missing, corrupt or inconsistent."""
    path = Path(directory) / SIDECAR_NAME
    if not path.is_file():
        raise DeployError(f"{str(directory)!r} is not an export directory: no {SIDECAR_NAME}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DeployError(f"{str(path)!r} is not valid JSON ({str(error).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise DeployError(f"{str(path)!r} must hold a JSON object")
    known = set(Sidecar.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise DeployError(f"{str(path)!r} has unknown fields {unknown}")
    try:
        return Sidecar(**data)
    except TypeError as error:  # a required field is missing
        raise DeployError(f"{str(path)!r}: {error}") from None


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_files(directory: Path, sidecar: Sidecar, fmt: str) -> Path:
    """The model file of format ``fmt`` after checking it exists and matches its recorded hash."""
    if fmt not in sidecar.files:
        raise DeployError(f"{str(directory)!r} has no {fmt} model; formats present: {', '.join(sidecar.files)}")
    path = Path(directory) / sidecar.files[fmt]
    if not path.is_file():
        raise DeployError(f"{str(path)!r} named in {SIDECAR_NAME} is missing")
    expected = sidecar.files_sha256.get(sidecar.files[fmt])
    if expected and file_sha256(path) != expected:
        raise DeployError(f"{str(path)!r} does not match the sha256 recorded in {SIDECAR_NAME} (corrupt or replaced)")
    return path
