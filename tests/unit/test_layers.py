"""The layers of ``robopt/`` are declared in one table, and every import goes down it (DESIGN.md section 9).

A module may import from its own layer or a lower one, never from a higher one. Every import statement is
counted as ``test_import_graph`` counts it: module level, inside functions, under ``TYPE_CHECKING``, and a string
constant that names a robopt module (an import by string). A failure names each upward statement with its file
and line.
"""

from __future__ import annotations

import pytest
from test_import_graph import ROOT, _modules, import_statements

# Lowest first. A module belongs to the layer of its longest listed prefix (``robopt.envs.robot`` is in the
# envs layer through ``robopt.envs``). ``robopt`` alone is the package's own ``__init__``.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "robopt", "robopt.options", "robopt.config", "robopt.logging", "robopt.checkpoint", "robopt.progress",
            "robopt.plotting", "robopt.cli_support", "robopt.rates",
        ),
    ),
    ("core", ("robopt.core", "robopt.distributed")),
    ("domain", ("robopt.policies", "robopt.buffers", "robopt.envs", "robopt.data", "robopt.llm")),
    ("algorithms", ("robopt.algorithms",)),
    ("build", ("robopt.build", "robopt.warm_start", "robopt.fleet")),
    ("composition root", ("robopt.experiment",)),
    ("runner", ("robopt.runner", "robopt.evaluation")),
    ("features", ("robopt.sweeps", "robopt.sim2real")),
    ("commands", ("robopt.commands",)),
    ("cli", ("robopt.cli", "robopt.__main__")),
)  # fmt: skip


def layer_of(module: str) -> int:
    """The index in ``LAYERS`` of a module's layer (its longest listed prefix); KeyError when none lists it."""
    best, best_length = None, -1
    for index, (_name, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    if best is None:
        raise KeyError(module)
    return best


def upward_imports() -> list[str]:
    """Each import from a lower layer to a higher one, as ``file:line: module (layer) -> module (layer)``."""
    rows = []
    for module, line, target in import_statements():
        low, high = layer_of(module), layer_of(target)
        if high > low:
            path = _modules()[module].relative_to(ROOT.parent)
            rows.append(f"{path}:{line}: {module} ({LAYERS[low][0]}) -> {target} ({LAYERS[high][0]})")
    return sorted(set(rows))


def test_every_module_has_a_layer():
    unlisted = []
    for module in _modules():
        try:
            layer_of(module)
        except KeyError:
            unlisted.append(module)
    assert not unlisted, f"modules in no layer of LAYERS: {', '.join(unlisted)}"


def test_imports_go_down_the_layers():
    rows = upward_imports()
    order = " < ".join(name for name, _ in LAYERS)
    assert not rows, f"{len(rows)} upward import(s) ({order}):\n" + "\n".join(rows)


def test_the_check_sees_an_upward_import():
    # The table itself: the CLI is above everything, the foundation below everything, envs.robot is in envs.
    assert layer_of("robopt.cli") == len(LAYERS) - 1
    assert layer_of("robopt.options") == 0
    assert layer_of("robopt.envs.robot.config") == layer_of("robopt.envs")
    assert layer_of("robopt.algorithms.sac") > layer_of("robopt.envs.registry")
    # The statements seen include lazy imports and import strings (the CLI names the deploy commands by string).
    statements = import_statements()
    assert any(module == "robopt.fleet.loop" and target == "robopt.fleet.worker" for module, _, target in statements)


def test_features_are_wired_in_one_composition_root():
    """Importing the features installs nothing; the one run config that names their sections is the root's."""
    # No global table: a run config's class carries its sections (robopt.config.Experiment.__sections__), and only
    # robopt.experiment (the composition root) defines such a class.
    owners = [path for path in ROOT.rglob("*.py") if "__sections__: ClassVar" in path.read_text()]
    assert sorted(p.relative_to(ROOT.parent).as_posix() for p in owners) == ["robopt/config.py", "robopt/experiment.py"]
    from robopt.config import ConfigError, Experiment, build_dataclass

    with pytest.raises(ConfigError, match="robopt.experiment.ExperimentConfig"):
        build_dataclass(Experiment, {})
    import subprocess
    import sys

    code = (  # importing every feature installs nothing anywhere
        "import robopt.algorithms, robopt.policies, robopt.fleet.build, robopt.envs.robot.config, robopt.build; "
        "from robopt.config import Experiment; assert Experiment.__sections__ is None"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    from robopt.experiment import FEATURES

    assert {spec.kind for spec in FEATURES.algorithms.values()} <= set(FEATURES.loop_kinds)
    assert [section.name for section in FEATURES.sections][:4] == ["algo", "rollout", "policy", "critic"]


def test_a_script_builds_a_loop_without_importing_anything_first():
    """The trap of the first composition root: a fresh process that builds a config through the public API and hands
    it to robopt.build (as benchmarks/ppo_vs_sb3.py does) gets a working loop, whatever it imported before."""
    import subprocess
    import sys

    code = (
        "from robopt.build import build_loop; from robopt.config import build_dataclass, config_to_dict; "
        "from robopt.experiment import ExperimentConfig; "
        "config = build_dataclass(ExperimentConfig, {'env': {'id': 'Pendulum-v1'}, 'rollout': {'num_steps': 32}, "
        "'algo': {'name': 'ppo', 'epochs': 1, 'minibatch_size': 32}}); "
        "assert config_to_dict(config)['algo']['name'] == 'ppo'; "
        "loop = build_loop(config); print('metrics', sorted(loop.iteration(0.0))[:3])"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "metrics" in result.stdout


def test_the_generic_on_policy_modules_carry_no_language_code():
    """The loop, PPO and the other on-policy updates import nothing of ``robopt.llm``: a language run's hooks and loss
    terms come in where its run is built (the policy kind's ``PolicySpec.on_policy``)."""
    generic = {f"robopt.algorithms.{name}" for name in ("onpolicy", "ppo", "trpo", "fpo", "dppo", "kinds")}
    statements = [(module, line, target) for module, line, target in import_statements() if module in generic]
    rows = [f"{m}:{line} -> {t}" for m, line, t in statements if t == "robopt.llm" or t.startswith("robopt.llm.")]
    assert not rows, rows
