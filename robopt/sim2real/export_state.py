"""Export of a policy with memory (``policy.recurrent``): its state goes in and out of the exported model.

Shapes: K parity steps, B batch, D obs dim, A action dim, M state width. The exported module is one deterministic
step ``(obs [B, D], state [B, M]) -> (action [B, A], next_state [B, M])``; the caller holds the state and zeroes it
at an episode start (the deploy runtime's ``RecurrentPolicy``). In the export directory:
    policy.onnx   inputs "obs" [B, D] and "state" [B, M] -> outputs "action" [B, A] and "next_state" [B, M]
    policy.pt     the same step traced with ``torch.jit.trace`` (a tuple out)
    parity.npz    "obs" [K, D], "episode_start" [K] (bool), "state" [K, M] (the state each step started from),
                  "action" [K, A]: a K-step sequence of the deterministic policy in the run's env, with its resets
Each model file is checked twice against torch: stepped through the K steps one at a time carrying its own state
(what a robot runs), and in one batched call on the recorded states; max |difference| <= 1e-5 both ways.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from robopt.sim2real.export_tools import TOLERANCE, onnx_session, quiet

STATE_INPUT, STATE_OUTPUT = "state", "next_state"


def step_sequence(call: Callable, obs: np.ndarray, starts: np.ndarray, state_dim: int):
    """Step ``call(obs [1, D], state [1, M]) -> (action [1, A], next_state [1, M])`` through obs [K, D], zeroing the
    state where ``starts`` [K] is set. Returns actions [K, A] and the state each step started from [K, M]."""
    state = np.zeros((1, state_dim), dtype=np.float32)
    actions, states = [], []
    for row, start in zip(obs, starts):
        if start:
            state = np.zeros_like(state)
        states.append(state[0])
        action, state = call(row[None], state)
        actions.append(np.asarray(action)[0])
        state = np.asarray(state, dtype=np.float32)
    return np.stack(actions).astype(np.float32), np.stack(states).astype(np.float32)


def torch_call(module) -> Callable:
    def call(obs: np.ndarray, state: np.ndarray):
        with torch.inference_mode():
            action, next_state = module(torch.from_numpy(obs), torch.from_numpy(state))
        return action.numpy(), next_state.numpy()

    return call


def export_onnx_stateful(module, obs: torch.Tensor, state: torch.Tensor, path: Path) -> None:
    """``module`` as ONNX: inputs "obs" [B, D] and "state" [B, M], outputs "action" and "next_state", B dynamic."""
    batch = torch.export.Dim("batch")
    with quiet():
        program = torch.onnx.export(
            module, (obs, state), dynamo=True, dynamic_shapes={"obs": {0: batch}, "state": {0: batch}},
            input_names=["obs", STATE_INPUT], output_names=["action", STATE_OUTPUT], verbose=False,
        )  # fmt: skip
        program.save(str(path))


def export_torchscript_stateful(module, obs: torch.Tensor, state: torch.Tensor, path: Path) -> None:
    with quiet():
        torch.jit.trace(module, (obs, state)).save(str(path))


def loaded_call(fmt: str, path: Path) -> Callable:
    """The exported file's step as ``call(obs, state) -> (action, next_state)`` on numpy arrays."""
    if fmt == "onnx":
        session = onnx_session(path)
        return lambda obs, state: tuple(session.run(None, {"obs": obs, STATE_INPUT: state}))
    return torch_call(torch.jit.load(str(path)))


def sequence_difference(call: Callable, obs: np.ndarray, starts: np.ndarray, states: np.ndarray,
                        reference: np.ndarray) -> float:  # fmt: skip
    """Max |call - reference| stepped through the sequence with its own state, and batched on the recorded states."""
    stepped, _ = step_sequence(call, obs, starts, states.shape[1])
    batched = np.asarray(call(obs, states)[0])
    if stepped.shape != reference.shape or batched.shape != reference.shape:
        return float("inf")
    return float(max(np.abs(stepped - reference).max(), np.abs(batched - reference).max()))


def export_stateful(module, obs: np.ndarray, starts: np.ndarray, formats, tmp: Path, file_names: dict, fail):
    """Write and check each format of a stateful ``module`` in ``tmp``; the parity arrays and differences.

    ``fail(fmt, error)`` turns an exporter's exception into the caller's one-line error."""
    state_dim = int(module.state_dim)
    reference, states = step_sequence(torch_call(module), obs, starts, state_dim)  # [K, A], [K, M]
    example_obs = torch.from_numpy(obs[:1]).expand(4, -1).contiguous()  # batch 4: the batch axis stays dynamic
    example_state = torch.zeros(4, state_dim)
    differences = {}
    for fmt in formats:
        path = tmp / file_names[fmt]
        try:
            (export_onnx_stateful if fmt == "onnx" else export_torchscript_stateful)(
                module, example_obs, example_state, path
            )
        except Exception as error:  # noqa: BLE001 - the caller makes it one line
            fail(fmt, error)
        difference = sequence_difference(loaded_call(fmt, path), obs, starts, states, reference)
        if not difference <= TOLERANCE:  # NaN fails too
            from robopt.options import ConfigError

            raise ConfigError(
                f"{fmt} export disagrees with torch over the {len(obs)}-step sequence: max |difference| "
                f"{difference:.2e} > {TOLERANCE:g}"
            )
        differences[fmt] = difference
    parity = {"obs": obs, "episode_start": starts, "state": states, "action": reference}
    return parity, differences, state_dim
