"""``Collective``: the few global operations a data-parallel run needs, and their one-process identity.

Every method is called by every rank at the same point of the same iteration (the loops' control flow does not
depend on rank), so a collective never waits on a rank that is elsewhere. Reductions that must be exact in
every rank's eyes (normalizer moments, advantage statistics) are done in float64 in two passes: the global count
and sum first, then the global sum of squared deviations from the global mean.

Shapes: B rows on this rank, D features.
"""

from __future__ import annotations

import dataclasses
import datetime
import os

import torch

from robopt.options import ConfigError

RANK_SEED_STRIDE = 1_000_000
"""Rank r's envs reset with ``seed + r * RANK_SEED_STRIDE`` (and its torch RNG is reseeded so), so the ranks of one
run never share a stream with each other or with the ranks of a neighbouring seed."""

DEFAULT_TIMEOUT_S = 300.0
"""Seconds a rendezvous or a collective waits for the other ranks (``ROBOPT_DIST_TIMEOUT_S`` overrides)."""


class RankLost(RuntimeError):
    """A collective failed: another rank stopped (crashed, was killed) or did not answer within the timeout."""


class Collective:
    """One process: rank 0 of a world of 1; every reduction returns its input's own statistics."""

    rank, world_size, local_rank = 0, 1, 0
    device = torch.device("cpu")  # where the collective's own small tensors live (a rank's GPU under nccl)

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes files (the run directory, logs, checkpoints): rank 0 only."""
        return self.rank == 0

    def average_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` replaced in place by its mean over ranks (the flat gradient); returned."""
        return tensor

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` replaced in place by its sum over ranks; returned."""
        return tensor

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` is true on any rank (a Ctrl-C seen by one rank stops all at the same iteration)."""
        return bool(flag)

    def mean_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and unbiased std of the rows of every rank's ``x`` [B] (advantage normalization)."""
        return x.mean(), x.std()

    def moments(self, x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        """(count, mean [D], biased variance [D]) in float64 of every rank's rows of ``x`` [B, D]."""
        return float(x.shape[0]), x.mean(0), x.var(0, unbiased=False)

    def mean_dict(self, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Scalar metrics averaged over ranks (every rank passes the same keys)."""
        return values

    def episode_values(self, returns: torch.Tensor, lengths: torch.Tensor, success=None) -> dict[str, float]:
        """Mean return, length (and success) of the episodes that ended on any rank, and their count (one sum)."""
        local = [float(returns.sum()), float(lengths.float().sum()), float(returns.numel()),
                 float(success.float().sum()) if success is not None else 0.0]  # fmt: skip
        totals = self.sum_(torch.tensor(local, dtype=torch.float64, device=self.device))
        count, values = float(totals[2]), {}
        if count > 0:
            values["episode_return"] = float(totals[0]) / count
            values["episode_length"] = float(totals[1]) / count
            if success is not None:
                values["success_rate"] = float(totals[3]) / count
        values["episodes"] = count
        return values

    def broadcast_module_(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers copied into every rank's ``module`` in place."""

    def gather_objects(self, obj) -> list | None:
        """Every rank's ``obj`` as a list on rank 0 (None elsewhere)."""
        return [obj]

    def close(self, synchronize: bool = False) -> None:
        """Leave the process group (``synchronize``: after a barrier, when every rank finished normally)."""


LOCAL = Collective()
"""The collective of a run in one process: every call the identity."""


class TorchCollective(Collective):
    """The collective over an initialized ``torch.distributed`` process group (gloo on CPU, nccl on CUDA)."""

    def __init__(self, device: torch.device) -> None:
        import torch.distributed as dist

        self.dist, self.device = dist, device
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", self.rank))

    def _call(self, what: str, operation, *args, **kwargs):
        """``operation(*args, **kwargs)``; a failure (a rank gone, a timeout) becomes one ``RankLost`` line."""
        try:
            return operation(*args, **kwargs)
        except RuntimeError as error:
            detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
            raise RankLost(
                f"rank {self.rank} of {self.world_size}: {what} failed, another rank stopped or did not answer "
                f"within {timeout_seconds():.0f} s ({detail})"
            ) from None

    def average_(self, tensor: torch.Tensor) -> torch.Tensor:
        self._call("all_reduce", self.dist.all_reduce, tensor)  # SUM: gloo has no AVG
        return tensor.div_(self.world_size)

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        self._call("all_reduce", self.dist.all_reduce, tensor)
        return tensor

    def any(self, flag: bool) -> bool:
        value = torch.tensor([1.0 if flag else 0.0], device=self.device)
        self._call("all_reduce", self.dist.all_reduce, value, op=self.dist.ReduceOp.MAX)
        return bool(value.item() > 0.0)

    def mean_std(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values = x.reshape(-1).to(torch.float64)
        totals = self.sum_(torch.stack((values.new_tensor(float(values.shape[0])), values.sum())))  # [2]
        mean = totals[1] / totals[0]
        squares = self.sum_((values - mean).square().sum().reshape(1))  # [1]
        std = torch.sqrt(squares[0] / (totals[0] - 1.0))
        return mean.to(x.dtype), std.to(x.dtype)

    def moments(self, x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
        rows = x.to(torch.float64)
        totals = self.sum_(torch.cat((rows.new_tensor([float(rows.shape[0])]), rows.sum(0))))  # [1 + D]
        count = float(totals[0])
        if count == 0.0:
            return 0.0, torch.zeros_like(totals[1:]), torch.zeros_like(totals[1:])
        mean = totals[1:] / count
        squares = self.sum_((rows - mean).square().sum(0))  # [D]
        return count, mean, squares / count

    def mean_dict(self, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if not values:
            return values
        keys = sorted(values)
        stacked = torch.stack([torch.as_tensor(values[k], dtype=torch.float64).reshape(()) for k in keys])
        stacked = self.average_(stacked.to(self.device))
        return {key: stacked[i].to(torch.float32) for i, key in enumerate(keys)}

    @torch.no_grad()
    def broadcast_module_(self, module: torch.nn.Module) -> None:
        for tensor in [*module.parameters(), *module.buffers()]:
            self._call("broadcast", self.dist.broadcast, tensor.data, src=0)

    def gather_objects(self, obj) -> list | None:
        gathered = [None] * self.world_size if self.rank == 0 else None
        self._call("gather", self.dist.gather_object, obj, gathered, dst=0)
        return gathered

    def close(self, synchronize: bool = False) -> None:
        if self.dist.is_initialized():
            if synchronize:  # rank 0 may still be evaluating or writing; a rank leaving first tore gloo down
                try:  # under it now and then ("terminate called without an active exception", signal 6)
                    self.dist.barrier()
                except Exception:  # noqa: BLE001 - a peer gone at the end changes nothing: leave anyway
                    pass
            self.dist.destroy_process_group()


def timeout_seconds() -> float:
    """The rendezvous and collective timeout: ``ROBOPT_DIST_TIMEOUT_S``, else ``DEFAULT_TIMEOUT_S``."""
    raw = os.environ.get("ROBOPT_DIST_TIMEOUT_S", "")
    try:
        value = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ConfigError(f"ROBOPT_DIST_TIMEOUT_S={raw!r}: expected a number of seconds > 0") from None
    if not value > 0.0:
        raise ConfigError(f"ROBOPT_DIST_TIMEOUT_S={raw!r}: expected a number of seconds > 0")
    return value


def join_from_environment(device: str) -> Collective:
    """``LOCAL`` in one process; under ``torchrun`` (``WORLD_SIZE`` > 1) this rank joins the process group.

    gloo when ``device`` is a CPU, nccl when it is CUDA (the rank then uses ``cuda:LOCAL_RANK``). A rendezvous that
    does not complete within the timeout, or a port in use, is one ConfigError line naming the address.
    """
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    if world <= 1:
        return LOCAL
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    address = f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"
    cuda = torch.device(device).type == "cuda"
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if cuda:
        if not torch.cuda.is_available():
            raise ConfigError(f"device={device}: data-parallel training on CUDA needs a GPU; this rank sees none")
        torch.cuda.set_device(local_rank)
    timeout = timeout_seconds()
    try:
        dist.init_process_group(
            "nccl" if cuda else "gloo",
            timeout=datetime.timedelta(seconds=timeout),
            device_id=torch.device("cuda", local_rank) if cuda else None,
        )
        collective = TorchCollective(torch.device("cuda", local_rank) if cuda else torch.device("cpu"))
        collective.any(False)  # a first collective: every rank has joined, or the timeout says which did not
    except (RuntimeError, ValueError, OSError) as error:  # RankLost from the first collective too
        detail = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise ConfigError(
            f"rank {rank} of {world}: could not join the process group at {address} within {timeout:.0f} s "
            f"(port in use, or a rank that never started?): {detail}"
        ) from None
    return collective


def rank_config(config, collective: Collective):
    """This rank's share of ``config``: ``env.num_envs / K`` envs and ``algo.minibatch_size / K`` rows per step
    (``critic_minibatch_size`` too; off-policy: ``algo.loop.batch_size / K`` and ``algo.loop.buffer_size / K``).

    ``config`` keeps the run's totals (what the user wrote, what the run directory records); a world size that does
    not divide them is one ConfigError line. CUDA devices become ``cuda:LOCAL_RANK``.
    """
    world = collective.world_size
    if world == 1:
        return config
    if config.env.num_envs % world != 0:
        raise ConfigError(
            f"env.num_envs={config.env.num_envs} does not divide over {world} ranks; use a multiple of {world}"
        )
    changes: dict = {"env": dataclasses.replace(config.env, num_envs=config.env.num_envs // world)}
    algo = config.algo
    sections = dict(config.sections)
    shares = {}
    for key in ("minibatch_size", "critic_minibatch_size"):  # PPO and FPO; TRPO's critic
        size = getattr(algo, key, None)
        if size is None:
            continue
        if size % world != 0:
            raise ConfigError(
                f"algo.{key}={size} does not divide over {world} ranks (each rank takes an equal share of every "
                f"minibatch); use a multiple of {world}"
            )
        shares[key] = size // world
    loop = getattr(algo, "loop", None)  # an off-policy schedule: each rank samples its own replay
    if loop is not None:
        loop_shares = {}
        for key in ("batch_size", "buffer_size"):
            size = getattr(loop, key)
            if size % world != 0:
                raise ConfigError(
                    f"algo.loop.{key}={size} does not divide over {world} ranks (each rank holds and samples an "
                    f"equal share); use a multiple of {world}"
                )
            loop_shares[key] = size // world
        shares["loop"] = dataclasses.replace(loop, **loop_shares)
    if shares:
        sections["algo"] = dataclasses.replace(algo, **shares)
    changes["sections"] = sections
    if torch.device(config.device).type == "cuda":
        changes["device"] = f"cuda:{collective.local_rank}"
    return dataclasses.replace(config, **changes)
