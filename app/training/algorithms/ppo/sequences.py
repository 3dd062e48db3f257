"""A recurrent policy's batch: the chunks cut into sequences for truncated back-propagation
through time (RLLINK.md "Recurrent policies").

Each chunk is one agent's steps within one episode, begun from the state the client fed
with its first observation (`state_in`; zeros where absent: a chunk that starts its
episode). The LSTM runs over every chunk from that state with the current weights, once,
without gradients: the values of all its observations (GAE, as for a feed-forward
policy, batch.py) and the state before every `max_seq_len`-th step. The chunk's steps are
then cut into sequences of `max_seq_len` (the last one shorter, padded), each begun from
the state recorded there; a sequence never crosses a chunk's end, so never an episode's.
PPO's minibatches are whole sequences, run through the LSTM with gradients from their
first state; the loss takes their steps without the padding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from app.experience import ChunkBlock
from app.training.batch import Minibatch, gae_advantages
from app.training.policy import ActorCritic


@dataclass(frozen=True)
class SequenceBatch:
    """N steps as flat tensors (as batch.Batch), and S sequences of at most L steps over them."""

    obs: torch.Tensor  # [N, *obs_shape]
    actions: torch.Tensor  # [N, ...]
    logp: torch.Tensor  # [N]
    values: torch.Tensor  # [N]
    advantages: torch.Tensor  # [N]
    returns: torch.Tensor  # [N]
    masks: torch.Tensor | None  # [N, k] action masks
    steps: torch.Tensor  # [S, L] each sequence's steps (indices into the flat tensors; padding repeats its last)
    valid: torch.Tensor  # [S, L] bool: a real step, not padding
    states: torch.Tensor  # [S, state_size] the LSTM's state before each sequence's first step

    @property
    def num_steps(self) -> int:
        return len(self.logp)

    def minibatches(self, policy: ActorCritic, minibatch_size: int, generator: torch.Generator) -> Iterator[Minibatch]:
        """One epoch: the sequences shuffled, about `minibatch_size` steps' worth at a time,
        each run through the LSTM from its first state; the padding left out."""
        sequences, length = self.steps.shape
        per_minibatch = max(1, round(minibatch_size / length))
        order = torch.randperm(sequences, generator=generator).to(self.steps.device)
        for start in range(0, sequences, per_minibatch):
            chosen = order[start : start + per_minibatch]
            steps, valid = self.steps[chosen], self.valid[chosen]
            features, _ = policy.recurrent(self.obs[steps], self.states[chosen])
            flat = steps[valid]  # the real steps, in sequence order
            features = features[valid]
            masks = None if self.masks is None else self.masks[flat]
            newlogprob, entropy = policy.dist_log_prob_and_entropy(policy.dist_inputs(features, masks), self.actions[flat])
            newvalue = policy.critic(features).squeeze(-1)
            yield Minibatch(
                newlogprob, entropy, newvalue, self.logp[flat], self.advantages[flat], self.returns[flat], self.values[flat], masks
            )


def chunk_states(blocks: list[ChunkBlock], state_size: int) -> np.ndarray:
    """Every chunk's state_in [K, state_size], zeros where a chunk gave none."""
    rows = [state if state is not None else np.zeros(state_size, np.float32) for block in blocks for state in block.state_in]
    return np.stack(rows).astype(np.float32)


@torch.no_grad()
def build_sequence_batch(
    blocks: list[ChunkBlock], policy: ActorCritic, gamma: float, gae_lambda: float, max_seq_len: int, reward_scale: float = 1.0
) -> SequenceBatch:
    """The chunks' steps with GAE advantages from the recurrent critic, cut into sequences."""
    device, length = policy.device, max_seq_len
    lengths = np.array([steps for block in blocks for steps in block.lengths])
    num_chunks, longest = len(lengths), int(lengths.max())
    observations = [chunk for block in blocks for chunk in np.split(block.obs, np.add(block.ends, range(1, block.num_chunks + 1))[:-1])]

    # The LSTM over every chunk (padded to the longest), max_seq_len observations at a time:
    # the state before each window is the state its sequence starts from.
    padded = np.zeros((num_chunks, longest + 1, *observations[0].shape[1:]), np.float32)
    for k, obs in enumerate(observations):
        padded[k, : len(obs)] = obs
    obs_tensor = torch.from_numpy(padded).to(device)
    state = torch.from_numpy(chunk_states(blocks, policy.state_size)).to(device)
    window_states, features = [], []
    for start in range(0, longest + 1, length):
        window_states.append(state)
        out, state = policy.recurrent(obs_tensor[:, start : start + length], state)
        features.append(out)
    outputs = torch.cat(features, dim=1)  # the LSTM's output at every observation [K, longest + 1, cell]
    all_values = policy.critic(outputs).squeeze(-1).cpu().numpy()

    # GAE over the flat steps, chunk after chunk (batch.py's, with these values).
    values = np.concatenate([all_values[k, :steps] for k, steps in enumerate(lengths)])
    next_values = np.concatenate([all_values[k, 1 : steps + 1] for k, steps in enumerate(lengths)])
    rewards = np.concatenate([block.rewards for block in blocks]) * reward_scale
    last_steps = np.cumsum(lengths) - 1
    next_nonterminal = np.ones(len(rewards), np.float32)
    terminated = np.array([terminated for block in blocks for terminated in block.is_terminated], bool)
    next_nonterminal[last_steps[terminated]] = 0.0
    deltas = rewards + gamma * next_nonterminal * next_values - values
    advantages = gae_advantages(deltas, last_steps, gamma * gae_lambda)

    # The sequences: chunk k's steps [j, j + L) start from window j // L's state.
    firsts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    starts = [(k, j) for k, steps in enumerate(lengths) for j in range(0, int(steps), length)]
    offsets = np.arange(length)
    steps = np.array([firsts[k] + np.minimum(j + offsets, lengths[k] - 1) for k, j in starts])
    valid = np.array([j + offsets < lengths[k] for k, j in starts])
    states = torch.stack([window_states[j // length][k] for k, j in starts])

    actions = np.concatenate([block.actions for block in blocks])
    masks = None
    if any(block.action_mask is not None for block in blocks):
        width = policy.num_dist_inputs
        masks = np.concatenate(
            [b.action_mask if b.action_mask is not None else np.ones((b.num_steps, width), np.float32) for b in blocks]
        )
    step_obs = np.concatenate([block.step_obs() for block in blocks])
    logp = recurrent_behaviour_logp(blocks, policy, outputs, lengths, actions, masks)
    tensors = {
        "obs": torch.from_numpy(step_obs),
        "actions": torch.from_numpy(actions),
        "logp": logp,
        "values": torch.from_numpy(values),
        "advantages": torch.from_numpy(advantages),
        "returns": torch.from_numpy(advantages + values),
        "masks": None if masks is None else torch.from_numpy(masks),
        "steps": torch.from_numpy(steps),
        "valid": torch.from_numpy(valid),
    }
    return SequenceBatch(**{name: None if t is None else t.to(device) for name, t in tensors.items()}, states=states)


def recurrent_behaviour_logp(
    blocks: list[ChunkBlock], policy: ActorCritic, outputs: torch.Tensor, lengths: np.ndarray,
    actions: np.ndarray, masks: np.ndarray | None,
) -> torch.Tensor:
    """The log-probs of the chunks' actions under the policy that chose them (batch.py's
    behaviour_logp for a recurrent policy): the clients' `action_logp` where every chunk has
    one, else the current policy's from the LSTM's `outputs` [K, longest + 1, cell]."""
    if all(block.action_logp is not None for block in blocks):
        return torch.from_numpy(np.concatenate([block.action_logp for block in blocks])).float()
    device = policy.device
    rows = torch.cat([outputs[k, :steps] for k, steps in enumerate(lengths)])
    mask = None if masks is None else torch.from_numpy(masks).to(device)
    return policy.log_prob(policy.dist_inputs(rows, mask), torch.from_numpy(actions).to(device)).float().cpu()
