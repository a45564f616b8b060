"""A run's parts built from its config (env, policy, critic, a pretrained start) and the loop of its kind.

``build_loop`` seeds and picks the run's kind: the kind a config section claims (the fleet's ``runs_as``) is built
by that section's ``loop``; the algorithms' kinds (``on_policy``, ``off_policy``, ``pretrain``) by
``build_algorithm_loop``, which calls the algorithm's ``AlgorithmSpec.build`` (one signature, returns the loop).
The sections are those the config carries (``robopt.config.sections_of``: its class names them).
"""

from __future__ import annotations

import random

import numpy as np
import torch

from robopt.algorithms import ALGORITHMS
from robopt.config import ConfigError, Experiment, config_to_dict, sections_of
from robopt.distributed.collective import LOCAL, RANK_SEED_STRIDE, Collective, rank_config
from robopt.envs import make_env
from robopt.policies import POLICIES
from robopt.policies.recurrent import check_sequence_length, policy_memory
from robopt.warm_start import initialize_critics, initialize_policy, load_teacher


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def available_device(name: str) -> torch.device:
    """``name`` as a torch device, or the CPU when it names CUDA on a machine without a GPU (eval, video, collect)."""
    device = torch.device(name)
    return torch.device("cpu") if device.type == "cuda" and not torch.cuda.is_available() else device


def check_device(name: str) -> torch.device:
    """``name`` as a torch device that this machine has; otherwise a one-line ConfigError (training, unlike
    evaluation, never falls back to the CPU silently)."""
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device={name!r} is not a torch device; use cpu, cuda or cuda:<index>") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={name!r} but torch {torch.__version__} sees no CUDA device here; use device=cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device={name!r} but this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device={name!r}: robopt trains on cpu or cuda")
    return device


def build_env(config: Experiment, num_envs: int | None = None, policy_side: bool = True, **extra):
    """The VecEnv of a config; env construction errors become one-line ConfigErrors.

    ``env.observe`` keeps only those observation indices (``robopt.envs.observe.ObservationSelectEnv``, always:
    it is the robot's sensors). On the policy's side (``policy_side``), a policy with ``policy.history`` K > 1 sees
    the window of the last K steps (``robopt.envs.history.HistoryEnv``), and a policy acting in chunks of H > 1
    actions (``policy.horizon``, diffusion) gets the env wrapped in ``robopt.envs.chunking.ActionChunkEnv``: one
    decision steps the env H times. ``policy_side=False`` (a simulated robot: it sends raw observations, the
    deploy runtime builds the window) wraps neither.
    """
    check_device(config.device)
    from_sections = section_env_options(config)
    try:
        env = make_env(
            config.env.id,
            num_envs or config.env.num_envs,
            backend=config.env.backend,
            device=config.device,
            **{**config.env.kwargs, **from_sections, **extra},
        )
    except (ValueError, TypeError) as error:
        raise ConfigError(f"env.id={config.env.id!r}: {error}") from None
    try:
        env = policy_view(config, env, policy_side)
    except ConfigError:
        env.close()
        raise
    horizon = getattr(config.policy, "horizon", 1)
    if horizon == 1 or not policy_side:
        return env
    from robopt.envs.chunking import ActionChunkEnv

    if hasattr(env, "compute_reward"):
        env.close()
        raise ConfigError(
            f"policy.horizon={horizon}: action chunks are not supported on goal tasks ({config.env.id}: hindsight "
            "relabelling assumes one action per transition); use policy.horizon=1"
        )
    return ActionChunkEnv(env, horizon)


def policy_view(config: Experiment, env, policy_side: bool = True):
    """``env`` as the config's policy sees it: its ``env.observe`` selection, then (``policy_side``) the window of
    ``policy.history`` K > 1 steps. ``evaluate-transfer`` wraps its native grid envs with it."""
    env = _observe(config, env)
    frames = getattr(config.policy, "history", 1)
    if policy_side and frames > 1:
        from robopt.envs.history import HistoryEnv

        env = HistoryEnv(env, frames)
    return env


def _observe(config: Experiment, env):
    """``env`` with only the ``env.observe`` indices (itself when the selection is empty)."""
    if not config.env.observe:
        return env
    if hasattr(env, "compute_reward") or config.env.id == "robot":
        what = (
            "goal tasks: hindsight relabelling needs the raw goal layout"
            if hasattr(env, "compute_reward")
            else ("a robot from its description: choose its task.observations terms instead")
        )
        raise ConfigError(f"env.observe={list(config.env.observe)}: not supported on {config.env.id} ({what})")
    from robopt.envs.observe import ObservationSelectEnv

    return ObservationSelectEnv(env, config.env.observe)


def section_env_options(config: Experiment) -> dict:
    """The env options the config's sections give (``Section.env_options``: the robot's description and task)."""
    options: dict = {}
    for section in sections_of(config).values():
        if section.env_options is not None:
            options.update(section.env_options(config))
    return options


def evaluation_env_options(config: Experiment) -> dict:
    """Env options for evaluating a run: a language task's held-out prompts, one greedy completion each."""
    return {"split": "heldout", "group_size": 1} if config.env.id == "robopt/Text" else {}


def build_policy(config: Experiment, env) -> torch.nn.Module:
    """The config's policy for ``env``; a policy that cannot be built from it (sizes, a model directory, LoRA
    targets) is a one-line ConfigError naming the policy kind."""
    try:
        return POLICIES[config.policy.name].build(config.policy, env).to(config.device)
    except ValueError as error:
        raise ConfigError(f"policy.name={config.policy.name}: {error}") from None


def resolve_torch_threads(config: Experiment) -> tuple[int, str]:
    """(intra-op threads, why): ``torch_threads`` when set; otherwise 1 on CPU, torch's default on a GPU.

    On CPU, robopt's networks are small (64-256 wide, minibatches of 64-4096): a second intra-op thread saves
    little and, when another process shares the cores, spins against it (TRPO on Pendulum measured 22 s alone
    and 5 min beside two single-threaded jobs with torch's default threads). The simulator has its own threads.
    """
    if config.torch_threads > 0:
        return config.torch_threads, "torch_threads"
    if torch.device(config.device).type == "cpu":
        return 1, "auto: small networks on CPU"
    return torch.get_num_threads(), "auto: torch default beside a GPU"


def algorithm_name(config: Experiment) -> str:
    """``algo.name`` of a config (the registry key of its algorithm section)."""
    return config_to_dict(config)["algo"]["name"]


ALGORITHM_KINDS = ("on_policy", "off_policy", "pretrain")  # the kinds build_algorithm_loop builds


def _claimed_kinds(config: Experiment) -> list[tuple[str, object]]:
    """(kind, loop builder) of each config section that claims the run (``Section.runs_as``: the fleet's)."""
    return [
        (kind, section.loop)
        for section in sections_of(config).values()
        if section.runs_as and (kind := section.runs_as(config))
    ]


def run_kind(config: Experiment) -> str:
    """The run's kind: the one a config section claims (``fleet`` with robots), else the algorithm's."""
    claimed = _claimed_kinds(config)
    if len(claimed) > 1:
        raise ConfigError(
            f"config sections claim more than one run kind ({', '.join(k for k, _ in claimed)}); configure one"
        )
    return claimed[0][0] if claimed else ALGORITHMS[algorithm_name(config)].kind


def build_loop(config: Experiment, initialize: bool = False, collective: Collective = LOCAL):
    """Seeded env, policy, algorithm and the loop of the run's kind (``run_kind``).

    ``initialize`` loads ``config.init_from``'s policy before the algorithm is built (a new run, not a resume).
    ``collective`` (a data-parallel run's, ``robopt.distributed``): this rank builds its share of the envs and
    minibatch (``rank_config``); only on-policy runs support several ranks.
    """
    check_device(config.device)
    seed_everything(config.seed)
    torch.set_num_threads(resolve_torch_threads(config)[0])
    check_recurrent(config)  # before any loop kind is built (a fleet's workers act without a state); every run kind
    # and every data-parallel rank comes through here
    kind = run_kind(config)
    build = dict(_claimed_kinds(config)).get(kind) or (build_algorithm_loop if kind in ALGORITHM_KINDS else None)
    if build is None:
        raise ConfigError(f"no loop is registered for runs of kind {kind!r} (its config's sections name none)")
    if collective.world_size == 1:
        return build(config, initialize)
    if kind not in ("on_policy", "off_policy"):
        raise ConfigError(
            f"data-parallel training (torchrun, --nproc) supports the on-policy and off-policy algorithms; "
            f"algo.name={algorithm_name(config)} runs as {kind} in one process"
        )
    return build_algorithm_loop(rank_config(config, collective), initialize, collective)


def build_algorithm_loop(config: Experiment, initialize: bool = False, collective: Collective = LOCAL):
    """The loop of an ``on_policy``, ``off_policy`` or ``pretrain`` algorithm, on one env batch of this process.

    With several ranks (``collective``) every rank draws the same initial weights from ``config.seed`` (and takes
    rank 0's, broadcast, to be sure), its envs reset from ``seed + rank * RANK_SEED_STRIDE``, and its torch, numpy
    and python streams restart from that seed once the parts are built.
    """
    env = build_env(config)
    try:
        policy = build_policy(config, env)
        spec = ALGORITHMS[algorithm_name(config)]
        check_algorithm_config(config, spec.kind, initialize)
        if initialize and config.init_from:
            initialize_policy(policy, config)
            if hasattr(policy, "reset_reference"):  # a language policy's KL reference is where RL starts
                policy.reset_reference()
        check_critic_kind(config, spec.kind)
        rank_seed = config.seed + RANK_SEED_STRIDE * collective.rank
        loop = spec.build(config, env, policy, seed=rank_seed, collective=collective)
        if hasattr(loop, "set_teacher"):  # distillation: the teacher run's policy and its view of this env
            loop.set_teacher(*load_teacher(config, env))
        if spec.kind == "off_policy":
            if initialize and (config.init_from or config.init_critic_from):
                loaded = initialize_critics(loop.algorithm, config)
                if not loaded and collective.rank == 0:  # a behaviour-cloning source: said once, the run goes on
                    print(
                        f"robopt: init_from={config.init_from!r} holds no Q critics (a behaviour-cloning run?): "
                        "the critics start fresh",
                        flush=True,
                    )
            if config.init_from and config.init_normalizer == "frozen":
                loop.normalizer = None  # the pretrained policy's statistics stay those it was trained under
        if collective.world_size > 1:
            if spec.kind == "on_policy":
                collective.broadcast_module_(loop.policy)
                collective.broadcast_module_(loop.critic)
            else:
                loop.use_collective(collective)  # refuses what cannot run on several ranks (pretraining)
            seed_everything(rank_seed)
        return loop
    except BaseException:
        env.close()
        raise


def check_algorithm_config(config: Experiment, kind: str, initialize: bool) -> None:
    """What a config asks that its algorithm's kind cannot do, as one-line ConfigErrors, before anything is built."""
    algo_name = algorithm_name(config)
    if initialize and config.critic_warmup > 0 and not config.init_from:
        raise ConfigError(
            f"critic_warmup={config.critic_warmup} needs init_from=RUN_DIR (a pretrained policy to keep frozen)"
        )
    if config.init_critic_from and kind != "off_policy":
        raise ConfigError(
            f"init_critic_from warm-starts the Q critics of off-policy algorithms; algo.name={algo_name} has none"
        )
    ft_steps, steps = getattr(config.policy, "ft_steps", 0), getattr(config.policy, "denoising_steps", 0)
    if initialize and not config.init_from and ft_steps < steps and kind != "pretrain":
        raise ConfigError(
            f"policy.ft_steps={ft_steps} < policy.denoising_steps={steps}: RL trains only the last {ft_steps} "
            "denoising steps and freezes the others, so start from a pretrained policy (init_from=RUN_DIR) or "
            "set policy.ft_steps=policy.denoising_steps"
        )


def check_recurrent(config: Experiment) -> None:
    """``policy.recurrent`` with an algorithm that cannot replay sequences: one line saying which can."""
    memory = policy_memory(config.policy)
    if memory is None:
        return
    algo_name = algorithm_name(config)
    if not ALGORITHMS[algo_name].sequences:
        able = ", ".join(name for name, spec in ALGORITHMS.items() if spec.sequences)
        raise ConfigError(
            f"policy.recurrent.type={memory.type} needs an algorithm that trains on sequences with the policy's "
            f"state ({able}); algo.name={algo_name} cannot use it: set "
            "policy.recurrent.type=none (or policy.history=K for memory as a window of past steps)"
        )
    check_sequence_length(memory.sequence_length, config.rollout.num_steps)


def check_critic_kind(config: Experiment, kind: str) -> None:
    """``critic.privileged`` is an option of the on-policy value critic; elsewhere a one-line ConfigError."""
    if kind in ("pretrain", "off_policy") and config.critic.privileged:
        algo_name = algorithm_name(config)
        on_policy = ", ".join(sorted(name for name, entry in ALGORITHMS.items() if entry.kind == "on_policy"))
        raise ConfigError(
            f"critic.privileged=true is for the value critic of the on-policy algorithms ({on_policy}), "
            f"not algo.name={algo_name}"
        )
