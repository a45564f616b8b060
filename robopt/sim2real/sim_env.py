"""The env behind a simulated robot (``--robot sim:...``, ``robopt sim-robot``): an env id, or a config.

A source that is a YAML config file or a run directory builds that config's env (a robot from its description,
``env.id: robot``, needs its ``robot`` and ``task`` sections; any other config works the same); anything else is
an env id for ``make_env``. A config's env is the robot's side of it (``build_env(policy_side=False)``: its
``env.observe`` selection, no observation history window, no action chunks: the robot sends raw observations and
takes one action per tick). One env row on the CPU (torch and the simulators are imported here, never by the
torch-free runtime).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path


def is_config_source(source: str) -> bool:
    """Whether ``source`` names a config file (.yaml, .yml) or a run directory (holding config.yaml)."""
    path = Path(source)
    return path.suffix in (".yaml", ".yml") or (path.is_dir() and (path / "config.yaml").is_file())


def make_sim_env(source: str):
    """A one-row env for a simulated robot from an env id, a config file or a run directory."""
    if not is_config_source(source):
        from robopt.envs import make_env

        return make_env(source, 1)
    from robopt.build import build_env
    from robopt.experiment import load_config, load_run_config

    path = Path(source)
    config = load_run_config(path) if path.is_dir() else load_config(path)
    return build_env(replace(config, device="cpu"), num_envs=1, policy_side=False)
