"""Export of a policy with memory (``policy.recurrent``): its state goes in and out of the exported model.

Shapes: K parity steps, B batch, D obs dim, A action dim, M state width. The exported module is one deterministic
step ``(obs [B, D], state [B, M]) -> (action [B, A], next_state [B, M])``; the caller holds the state and zeroes it
at an episode start (the deploy runtime's ``RecurrentPolicy``). In the export directory (``robopt.sim2real.export``
writes and checks the files):
    policy.onnx   inputs "obs" [B, D] and "state" [B, M] -> outputs "action" [B, A] and "next_state" [B, M]
    policy.pt2    the same step as a ``torch.export`` ExportedProgram (a tuple out), B dynamic for both inputs
    parity.npz    "obs" [K, D], "episode_start" [K] (bool), "state" [K, M] (the state each step started from),
                  "action" [K, A]: a K-step sequence of the deterministic policy in the run's env, with its resets
Each model file is checked twice against torch: stepped through the K steps one at a time carrying its own state
(what a robot runs), and in one batched call on the recorded states; max |difference| <= 1e-5 both ways.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

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


def sequence_difference(
    call: Callable, obs: np.ndarray, starts: np.ndarray, states: np.ndarray, reference: np.ndarray
) -> float:
    """Max |call - reference| stepped through the sequence with its own state, and batched on the recorded states."""
    stepped, _ = step_sequence(call, obs, starts, states.shape[1])
    batched = np.asarray(call(obs, states)[0])
    if stepped.shape != reference.shape or batched.shape != reference.shape:
        return float("inf")
    return float(max(np.abs(stepped - reference).max(), np.abs(batched - reference).max()))


def sequence_parity(module, obs: np.ndarray, starts: np.ndarray) -> tuple[dict, tuple, Callable]:
    """The torch reference of a stateful ``module`` on obs [K, D] with resets at ``starts`` [K]: the parity arrays,
    an example input (obs [4, D], state [4, M]: batch 4 keeps the batch axis dynamic) and ``difference(call)``, the
    ``sequence_difference`` of an exported model's ``call(obs, state) -> (action, next_state)``."""
    state_dim = int(module.state_dim)
    reference, states = step_sequence(torch_call(module), obs, starts, state_dim)  # [K, A], [K, M]
    example = torch.from_numpy(obs[:1]).expand(4, -1).contiguous(), torch.zeros(4, state_dim)
    parity = {"obs": obs, "episode_start": starts, "state": states, "action": reference}
    return parity, example, lambda call: sequence_difference(call, obs, starts, states, reference)
