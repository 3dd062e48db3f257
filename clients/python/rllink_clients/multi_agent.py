"""The multi-agent reference client: plays a `MultiAgentEnv` with the gateway's modules
and sends every agent's trajectory back as episode chunks.

GET_CONFIG names the modules (`policies`) and which agent plays which (`policy_mapping`,
first matching glob); GET_STATE and every SET_STATE bring one ONNX model per module
(`onnx_files`). On each step the agents due to act are grouped by module, one batched
model call per module, each agent's action mask (`infos[agent]["action_mask"]`) fed to a
masked module's model and sent in its chunk. Once `env_steps_per_sample` agent steps are
complete, one EPISODES_AND_GET_STATE sends a chunk per agent: its own obs, actions,
rewards and flags, under the episode id its episode's agents share, naming the module
that played it (`module_id`). Frozen self-play opponents (`trainable: false`) and local `opponents` are
played, never sent. `seatings` swap who plays which seat game by game (self-play seats).
Every Nth episode of each env (SET_CONFIG's `evaluation_interval`) is an evaluation
episode: the modules' agents play the mode, and its chunks say `evaluation`. A Box module
whose `action_noise` is pink (a SAC module's default) samples each agent's actions with
that agent episode's own pink noise (`rllink.action_dists.PinkNoise`), white otherwise.

    python -m rllink_clients.multi_agent --scene cartpole:8,pendulum:1 --target-return 150
    python -m rllink_clients.multi_agent --transport ws --port 8000 --scene countdown --opponent random
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import sys
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import numpy as np

from rllink.action_dists import PinkNoise
from rllink_clients.games import REACH_ENV_ID, CoordinationGame, CountdownGame, random_opponent, scripted_opponent
from rllink_clients.gym_client import RLLIB_REFERENCE_INPUT_NAME, OnnxPolicy, budget_spent, is_evaluation_episode
from rllink_clients.multi_agent_env import ALL, MultiAgentEnv, gymnasium_scene
from rllink_clients.rllink_client import GatewayUnreachable, RLlinkClient
from rllink_clients.trajectory import AgentTrajectory, PlayedAction

log = logging.getLogger("rllink_clients")

DEFAULT_MODULE_ID = "default_policy"  # the one module of a gateway that announces no `policies`
SAMPLED_DISTRIBUTIONS = ("categorical", "gaussian", "squashed_gaussian")
BOX_DISTRIBUTIONS = ("gaussian", "squashed_gaussian")  # those whose samples take N(0, 1) draws, white or pink
RETURN_WINDOW = 20  # episodes per module (and per agent) that `mean_return` and the target look at
OUTCOME_WINDOW = 100  # recent outcomes per module that `outcome_counts` counts

SCRIPTED_REFERENCE = "scripted_reference"  # the ONNX metadata key naming the scripted player a model stands in for
Opponent = Callable[..., Any]  # a local policy: (observation) -> env action; (observation, mask) in a masked env
Seating = dict[str, "str | Opponent"]  # one game's seats: agent id -> the module id, or local opponent, playing it


# --- The gateway's modules and who plays which agent -------------------------------------


@dataclass(frozen=True)
class ModuleSpec:
    """One module (policy) as SET_CONFIG announces it."""

    module_id: str
    observation_space: dict
    action_space: dict
    input_name: str
    trainable: bool = True
    distribution: str | None = None  # SET_CONFIG's action_distribution
    mask_input: str | None = None  # SET_CONFIG's onnx_action_mask_input_name: a masked module's model takes masks
    action_noise: str = "white"  # SET_CONFIG's: a Box sample's N(0, 1) draws, white or pink

    @property
    def pink_noise(self) -> bool:
        """Whether its agents' Box samples draw pink noise, each agent episode its own processes."""
        return self.action_noise == "pink" and self.distribution in BOX_DISTRIBUTIONS

    def observed(self, obs: Any) -> Any:
        """`obs` in this module's declared shape where it has as many values in another shape
        (a board [6, 7, 2] for a module declared flat, [84], or the other way round): the
        module decides how its policy reads the board. Else `obs` as it is."""
        shape = self.observation_space.get("shape")
        if shape is None:  # a dict space: sent flat, as given
            return obs
        array = np.asarray(obs)
        if array.shape == tuple(shape) or array.dtype == object or array.size != math.prod(shape):
            return obs
        return array.reshape(shape)


class UnmappedAgent(ValueError):
    """An agent no `policy_mapping` glob (and no local opponent) claims: it cannot be played."""


@dataclass(frozen=True)
class GatewayConfig:
    """What the client needs of SET_CONFIG: the modules, the mapping, the sample size."""

    env_steps_per_sample: int
    modules: dict[str, ModuleSpec]
    mapping: dict[str, str]
    default_module_id: str

    @classmethod
    def from_set_config(cls, config: dict[str, Any]) -> GatewayConfig:
        """Read `policies` and `policy_mapping`; a gateway that has neither has one module."""
        if config.get("type") != "SET_CONFIG":
            raise RuntimeError(f"the gateway answered GET_CONFIG with {config}")
        policies = config.get("policies") or {DEFAULT_MODULE_ID: config}
        modules = {}
        for module_id, policy in policies.items():
            action_space = policy.get("action_space", {"type": "discrete"})
            default_distribution = "categorical" if action_space["type"] == "discrete" else "gaussian"
            distribution = policy.get("action_distribution", default_distribution)
            if distribution not in SAMPLED_DISTRIBUTIONS:
                raise ValueError(
                    f"module {module_id!r} samples a {distribution!r} distribution; "
                    f"this client samples {' and '.join(SAMPLED_DISTRIBUTIONS)} only"
                )
            modules[module_id] = ModuleSpec(
                module_id,
                policy.get("observation_space", {}),
                action_space,
                policy.get("onnx_input_name", RLLIB_REFERENCE_INPUT_NAME),
                bool(policy.get("trainable", True)),
                distribution,
                policy.get("onnx_action_mask_input_name"),
                policy.get("action_noise", "white"),
            )
        return cls(
            env_steps_per_sample=int(config["env_steps_per_sample"]),
            modules=modules,
            mapping=dict(config.get("policy_mapping") or {}),
            default_module_id=config.get("default_module_id", next(iter(modules))),
        )

    def module_for(self, agent_id: str) -> ModuleSpec:
        """The module of the first glob matching `agent_id` (fnmatchcase); with no mapping and
        one module, that module. Raises UnmappedAgent otherwise."""
        for glob, module_id in self.mapping.items():
            if fnmatchcase(agent_id, glob):
                return self.modules[module_id]
        if not self.mapping and len(self.modules) == 1:
            return next(iter(self.modules.values()))
        raise UnmappedAgent(
            f"agent {agent_id!r} maps to no module: no policy_mapping glob matches it "
            f"({', '.join(self.mapping) or 'the gateway sent no policy_mapping'}); "
            f"add one on the gateway, or play the agent with a local opponent"
        )


class Casting:
    """Who plays each agent (this game's seating, else a local opponent, else its module) and
    whose experience is sent: agents of trainable modules in `module_filter` (default: every
    trainable module). Game g is seated by `seatings[g % len(seatings)]` (`start_game`)."""

    def __init__(
        self,
        config: GatewayConfig,
        opponents: dict[str, Opponent] | None = None,
        module_filter: Collection[str] | None = None,
        seatings: Sequence[Seating] | None = None,
    ) -> None:
        self.config = config
        self.opponents = dict(opponents or {})
        self.module_filter = None if module_filter is None else set(module_filter)
        unknown = (self.module_filter or set()) - set(config.modules)
        if unknown:
            raise ValueError(f"module_filter names {sorted(unknown)}; the gateway has {list(config.modules)}")
        self.seatings = list(seatings or [{}])
        seated = {seat for seating in self.seatings for seat in seating.values() if isinstance(seat, str)}
        if seated - set(config.modules):
            raise ValueError(f"seatings name modules {sorted(seated - set(config.modules))}; the gateway has {list(config.modules)}")
        self.game = 0
        self._cast: dict[tuple[str, int], tuple[Opponent | None, ModuleSpec | None, bool]] = {}

    def start_game(self, index: int) -> None:
        """Seat the agents of game `index` (0, 1, ...)."""
        self.game = index

    def opponent(self, agent_id: str) -> Opponent | None:
        """The local policy of the first `opponents` glob matching the agent, if any."""
        return self._of(agent_id)[0]

    def module(self, agent_id: str) -> ModuleSpec | None:
        """The module that plays the agent; None for a local opponent. Raises UnmappedAgent."""
        return self._of(agent_id)[1]

    def module_id(self, agent_id: str) -> str | None:
        """The id of the module that plays the agent in this game; None for a local opponent."""
        module = self._of(agent_id)[1]
        return None if module is None else module.module_id

    def sends(self, agent_id: str) -> bool:
        return self._of(agent_id)[2]

    def observed(self, agent_id: str, obs: Any) -> Any:
        """The agent's observation in its module's shape (ModuleSpec.observed); a local opponent's as it is."""
        module = self._of(agent_id)[1]
        return obs if module is None else module.observed(obs)

    def trained(self, agent_ids: Iterable[str]) -> list[str]:
        """The modules whose experience these agents send, over every seating."""
        game, trained = self.game, set()
        for index in range(len(self.seatings)):
            self.game = index
            trained |= {self.module_id(agent_id) for agent_id in agent_ids if self.sends(agent_id)}
        self.game = game
        return sorted(trained)

    def _of(self, agent_id: str) -> tuple[Opponent | None, ModuleSpec | None, bool]:
        key = (agent_id, self.game % len(self.seatings))
        if key not in self._cast:
            seat = self.seatings[key[1]].get(agent_id)
            if seat is None:
                opponent = next((play for glob, play in self.opponents.items() if fnmatchcase(agent_id, glob)), None)
                module = None if opponent is not None else self.config.module_for(agent_id)
            else:
                opponent, module = (None, self.config.modules[seat]) if isinstance(seat, str) else (seat, None)
            sends = module is not None and module.trainable and (self.module_filter is None or module.module_id in self.module_filter)
            self._cast[key] = (opponent, module, sends)
        return self._cast[key]


def swapped_seatings(config: GatewayConfig, seats: Sequence[str], rival: Opponent | None = None) -> list[Seating]:
    """Seats swapped game by game in a two-player game: the learner module plays `seats[0]`
    in even games and `seats[1]` in odd ones; the other seat is played by `rival` (a local
    opponent) if given, else by the learner's frozen self-play opponent module."""
    trainable = [m for m, spec in config.modules.items() if spec.trainable]
    frozen = [m for m, spec in config.modules.items() if not spec.trainable]
    if rival is not None:
        if len(trainable) != 1:
            raise ValueError(
                f"a local opponent takes one seat, the learner the other: the gateway has {len(trainable)} "
                f"trainable modules ({', '.join(trainable)}); give it one"
            )
        learner, other = trainable[0], rival
    else:
        pairs = [(m, f) for m in trainable for f in frozen if f == f"{m}_opponent"]
        if not pairs and len(trainable) == len(frozen) == 1:
            pairs = [(trainable[0], frozen[0])]  # a self-play module with its own opponent_module_id
        if len(pairs) != 1:
            raise ValueError(
                f"seats swap between one self-play module and its frozen opponent; the gateway has "
                f"trainable {trainable} and frozen {frozen}"
            )
        learner, other = pairs[0]
    first, second = seats
    return [{first: learner, second: other}, {first: other, second: learner}]


# --- The policies: one ONNX model per module, refreshed from every SET_STATE -------------


class ModulePolicies:
    """The ONNX policy of every module, loaded from SET_STATE's `onnx_files`; a module whose
    model names a scripted reference (self-play's `scripted_references`) is played by the
    local `scripted` player of that name instead."""

    def __init__(self, config: GatewayConfig, rng: np.random.Generator, scripted: Mapping[str, Opponent] | None = None) -> None:
        self.config, self.rng = config, rng
        self.scripted = dict(scripted or {})
        self.policies: dict[str, OnnxPolicy] = {}
        self.playing_scripted: dict[str, str] = {}  # module -> the scripted reference its model names
        self._payloads: dict[str, str] = {}
        self.weights_seq_no = 0

    def load(self, set_state: dict[str, Any]) -> None:
        """Take the models of a SET_STATE; unchanged ones (frozen opponents) are kept as they are."""
        if set_state.get("type") != "SET_STATE":
            raise RuntimeError(f"the gateway answered {set_state}")
        files = set_state.get("onnx_files") or {self.config.default_module_id: set_state["onnx_file"]}
        missing = set(self.config.modules) - set(files)
        if missing:
            raise RuntimeError(f"SET_STATE carries no model for modules {sorted(missing)}")
        self.weights_seq_no = int(set_state["weights_seq_no"])
        for module_id, spec in self.config.modules.items():
            if self._payloads.get(module_id) != files[module_id]:
                self.policies[module_id] = OnnxPolicy.from_base64(
                    files[module_id],
                    self.weights_seq_no,
                    spec.input_name,
                    spec.action_space,
                    self.rng,
                    spec.distribution,
                    spec.mask_input,
                )
                self._payloads[module_id] = files[module_id]
                self._take_scripted(module_id)

    def _take_scripted(self, module_id: str) -> None:
        """Note whether the module's new model stands in for a scripted reference, which this client must have."""
        name = self.policies[module_id].metadata.get(SCRIPTED_REFERENCE)
        if name is None:
            self.playing_scripted.pop(module_id, None)
            return
        if name not in self.scripted:
            have = ", ".join(sorted(self.scripted)) or "none"
            raise ValueError(
                f"the gateway's self-play league has module {module_id!r} play the scripted reference {name!r}, "
                f"which this client does not have (it has: {have}); give the client that player, or remove it "
                "from the module's self_play.scripted_references"
            )
        self.playing_scripted[module_id] = name

    def act(
        self,
        module_id: str,
        observations: list[Any],
        masks: list[Any] | None = None,
        explore: bool | Sequence[bool] = True,
        states: Sequence[Any] | None = None,
        noises: Sequence[Any] | None = None,
    ) -> list[PlayedAction]:
        """An action for each observation, among those its mask allows (None: all), with one
        call of the module's model: sampled, or the distribution's mode unless `explore` (one
        flag for all, or one per observation: an evaluation episode's agents play the mode).
        The mode of a Box module: the mean (the env gets it clipped to the bounds), tanh of the
        mean scaled to the bounds (`squashed_gaussian`), from a gSDE model's noise-free output.
        A recurrent module's model is fed each agent's state (`states`; None: zeros, an
        episode's start) and each action carries the state after it (`state_out`); a pink-noise
        module's agents sample with their noise processes (`noises`; None: new ones,
        an episode's start) advanced a step, which each action carries (`noise_out`)."""
        spec = self.config.modules[module_id]
        masks = list(masks) if masks is not None else [None] * len(observations)
        if module_id in self.playing_scripted:
            play = self.scripted[self.playing_scripted[module_id]]
            chosen = [play(obs) if mask is None else play(obs, mask) for obs, mask in zip(observations, masks)]
            return [PlayedAction(a, _chunk_action(a), 0.0, self.weights_seq_no, m) for a, m in zip(chosen, masks)]
        batch = np.stack([np.asarray(spec.observed(obs), dtype=np.float32) for obs in observations])
        expected = tuple(spec.observation_space.get("shape", batch.shape[1:]))
        if batch.shape[1:] != expected:
            raise ValueError(
                f"module {module_id!r} observes shape {list(expected)}, the env gave {list(batch.shape[1:])}: declare the "
                "module's observation_space in the env's shape"
            )
        mask_batch = _mask_batch(module_id, spec, masks)
        explores = np.broadcast_to(np.asarray(explore, dtype=bool), (len(observations),))
        policy = self.policies[module_id]
        state_outs: Sequence[Any] = [None] * len(observations)
        if policy.state_size:  # a PPO model: one output, whatever `explore` says
            zeros = np.zeros(policy.state_size, np.float32)
            given = states if states is not None else [None] * len(observations)
            state_batch = np.stack([zeros if state is None else np.asarray(state, np.float32) for state in given])
            dist_inputs, state_outs = policy.dist_inputs_and_state(batch, state_batch, mask_batch)
        else:
            dist_inputs = _dist_inputs(policy, batch, mask_batch, explores)
        # The mode where not exploring, among the mask's actions (as the model's logits are already masked: to be sure).
        mode_mask = None if explores.all() else mask_batch
        noise, noise_outs = self._pink_noise(spec, dist_inputs, noises)
        actions, logps = policy.sample(dist_inputs, explores, mode_mask, noise)
        version = self.weights_seq_no
        return [
            PlayedAction(_env_action(action, spec.action_space), _chunk_action(action), float(logp), version, mask, state, processes)
            for action, logp, mask, state, processes in zip(actions, logps, masks, state_outs, noise_outs)
        ]

    def _pink_noise(
        self, spec: ModuleSpec, dist_inputs: np.ndarray, noises: Sequence[Any] | None
    ) -> tuple[np.ndarray | None, list[Any]]:
        """A pink-noise module's N(0, 1) draws [n, d] and each row's processes after them: every
        agent's (new where None) advanced one step, as the protocol's "Exploration noise" asks
        of every client (`sample` zeroes the rows that do not explore). None and no processes
        for a white-noise module (`sample` draws its own)."""
        rows = len(dist_inputs)
        if not spec.pink_noise:
            return None, [None] * rows
        dim = dist_inputs.shape[1] // 2  # a Box's dist inputs: the d means, then the d log stds
        given = list(noises) if noises is not None else [None] * rows
        processes = np.concatenate([PinkNoise.start(self.rng, 1, dim) if p is None else p for p in given])
        draws = PinkNoise.step(processes, self.rng)  # in place, in concatenate's copy: not the given arrays
        return draws, [processes[row : row + 1] for row in range(rows)]


def _dist_inputs(policy: OnnxPolicy, batch: np.ndarray, masks: np.ndarray | None, explores: np.ndarray) -> np.ndarray:
    """The model's distribution inputs for each row: a gSDE model's noise-free output (its
    mode, `OnnxPolicy.dist_inputs` with explore False) for the rows that do not explore,
    output 0 for the others; one model call unless the batch mixes both with such a model."""
    if not explores.any() or explores.all() or policy.outputs[True] == policy.outputs[False]:
        return policy.dist_inputs(batch, masks, bool(explores.any()))
    dist_inputs = policy.dist_inputs(batch, masks)
    greedy = ~explores
    dist_inputs[greedy] = policy.dist_inputs(batch[greedy], None if masks is None else masks[greedy], explore=False)
    return dist_inputs


def _mask_batch(module_id: str, spec: ModuleSpec, masks: list[Any]) -> np.ndarray | None:
    """The masks as one float32 [N, k] array (all-allowed rows for None); None when none is given."""
    given = [np.asarray(mask, np.float32) for mask in masks if mask is not None]
    if not given:
        return None
    if spec.mask_input is None:
        raise ValueError(
            f"the env masks actions, but module {module_id!r} takes no action mask: "
            f"start the gateway with action_masking for it (--action-masking, or its entry of policies)"
        )
    width = len(given[0])
    return np.stack([np.ones(width, np.float32) if mask is None else np.asarray(mask, np.float32) for mask in masks])


def _env_action(action: np.ndarray, space: dict) -> Any:
    """An int for a Discrete space; a float32 array clipped to a Box's bounds."""
    if space["type"] == "discrete":
        return int(action)
    low, high = space.get("low"), space.get("high")
    action = np.asarray(action, dtype=np.float32)
    if low is None and high is None:
        return action
    return np.clip(action, -np.inf if low is None else low, np.inf if high is None else high).astype(np.float32)


def _chunk_action(action: Any) -> Any:
    """The action as the chunk carries it: an int, or (nested) lists of floats."""
    action = np.asarray(action)
    return int(action) if action.ndim == 0 and np.issubdtype(action.dtype, np.integer) else action.tolist()


# --- Cutting each agent's trajectory into chunks -----------------------------------------


class SceneCollector:
    """Steps a MultiAgentEnv with the actions it is given and keeps each agent's trajectory.

    Agents of one episode share its episode id. An agent that appears again after it was
    done (a `GymnasiumScene` restarting one env) starts a new trajectory under a fresh
    episode id: each sub-episode is an episode of its own. Rewards for an agent with no
    action in flight (before its first action, after its end) have no step to go to and
    are dropped. `ready_steps` counts the complete steps of agents whose experience is
    sent (`sends`), which `take_chunks` then cuts off.

    Who plays a trajectory is settled when it starts: `on_game(index)` is called as each
    game (episode) starts, before its agents are asked about, with its index among the
    env's training games, or among its evaluation games for an evaluation one (so that
    seats swapped game by game alternate in each kind, whatever N); `sends(agent_id)` says
    whether its chunks are sent, and `module_of(agent_id)` (if given) names the module
    playing it, which its chunks carry as `module_id`. An acting agent's action mask is
    `infos[agent]["action_mask"]`, kept in `masks`.

    Evaluation episodes (RLLINK.md, "Evaluation episodes"), with `evaluation_interval` N
    above 0: every Nth episode of the scene (the Nth, 2Nth, ...: `is_evaluation_episode` of
    the scene episodes before it) is one, and so is every Nth episode of an agent that
    restarts alone (of the episodes that agent played before it): its trajectories are
    `evaluation` ones, whose chunks say so, and `evaluating` names its acting agents, which
    play the mode.
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        sends: Callable[[str], bool],
        seed: int | None = None,
        *,
        module_of: Callable[[str], str | None] | None = None,
        on_game: Callable[[int], None] | None = None,
        evaluation_interval: int = 0,
        observed: Callable[[str, Any], Any] | None = None,
    ) -> None:
        self.env, self.sends, self.module_of, self.on_game = env, sends, module_of, on_game
        self.observed = observed  # (agent_id, obs) -> the obs its player takes (Casting.observed); None: as the env gives it
        self.evaluation_interval = evaluation_interval
        self.scene_steps = self.agent_steps = self.scene_episodes = 0
        self.evaluation_scene_episodes = 0  # of the scene episodes that ended, the evaluation ones
        self.ready_steps = 0
        self.evaluation = False  # whether the scene's episode under way is an evaluation one
        self._played: dict[str, int] = defaultdict(int)  # agent -> its episodes (with an action) that ended
        self.live: dict[str, AgentTrajectory] = {}  # each agent's latest trajectory this episode
        self.finished: list[AgentTrajectory] = []  # ended, with steps maybe not yet taken
        self.acting: dict[str, Any] = {}  # agent -> the observation it acts on next
        self.masks: dict[str, Any] = {}  # acting agent -> the action mask of that observation, if any
        self._sent: set[AgentTrajectory] = set()  # the trajectories whose chunks are sent
        self._start_episode(seed)

    @property
    def states(self) -> dict[str, Any]:
        """The acting agents' recurrent states (None: zeros, an episode's start; feed-forward modules' too)."""
        return {agent_id: self.live[agent_id].state for agent_id in self.acting}

    @property
    def noises(self) -> dict[str, Any]:
        """The acting agents' pink-noise processes (None: new ones, an episode's start; white-noise modules' too)."""
        return {agent_id: self.live[agent_id].noise for agent_id in self.acting}

    @property
    def evaluating(self) -> set[str]:
        """The acting agents whose episode is an evaluation one: they play the mode."""
        if not self.evaluation_interval:
            return set()
        return {agent_id for agent_id in self.acting if self.live[agent_id].evaluation}

    def _start_episode(self, seed: int | None) -> None:
        self.evaluation = is_evaluation_episode(self.scene_episodes, self.evaluation_interval)
        if self.on_game is not None:  # its index among the games of its kind, so that seats alternate in each
            evaluations = self.evaluation_scene_episodes
            self.on_game(evaluations if self.evaluation else self.scene_episodes - evaluations)
        self.episode_id, self.live, self.acting = uuid.uuid4().hex, {}, {}
        obs, infos = self.env.reset(seed=seed)
        self._observe(obs, {}, {}, infos)

    def step(self, actions: dict[str, PlayedAction]) -> list[AgentTrajectory]:
        """One env step; returns the trajectories that ended in it (with at least one action)."""
        if set(actions) != set(self.acting):
            raise ValueError(f"agents {sorted(self.acting)} act now, got actions for {sorted(actions)}")
        for agent_id, played in actions.items():
            self.live[agent_id].act(played)
        obs, rewards, terminateds, truncateds, infos = self.env.step({agent_id: played.env_action for agent_id, played in actions.items()})
        self.scene_steps += 1
        self.agent_steps += len(actions)
        for agent_id, reward in rewards.items():
            trajectory = self.live.get(agent_id)
            if trajectory is not None and trajectory.in_flight:
                trajectory.reward(reward)
        ended = self._observe(obs, terminateds, truncateds, infos)
        if terminateds.get(ALL) or truncateds.get(ALL):
            unfinished = sorted(agent_id for agent_id, t in self.live.items() if not t.done)
            if unfinished:
                raise ValueError(f"the episode ended without a final observation for {unfinished}, which acted")
            self.scene_episodes += 1
            self.evaluation_scene_episodes += self.evaluation
            self._start_episode(None)
        return [trajectory for trajectory in ended if trajectory.num_steps]

    def _observe(self, obs: dict, terminateds: dict, truncateds: dict, infos: dict) -> list[AgentTrajectory]:
        """File each agent's new observation; the agents not done act next."""
        self.acting, self.masks, ended = {}, {}, []
        for agent_id, ob in obs.items():
            if self.observed is not None:
                ob = self.observed(agent_id, ob)
            trajectory = self.live.get(agent_id)
            if trajectory is None or trajectory.done:
                if trajectory is None:  # its first in the scene's episode
                    episode_id, evaluation = self.episode_id, self.evaluation
                else:  # back on its own after its episode ended: an episode of its own
                    episode_id = uuid.uuid4().hex
                    evaluation = is_evaluation_episode(self._played[agent_id], self.evaluation_interval)
                module_id = None if self.module_of is None else self.module_of(agent_id)
                trajectory = AgentTrajectory(episode_id, agent_id, ob, module_id, evaluation=evaluation)
                self.live[agent_id] = trajectory
                if self.sends(agent_id):
                    self._sent.add(trajectory)
            else:
                trajectory.observe(ob)
                self.ready_steps += 1 if trajectory in self._sent else 0
            terminated = bool(terminateds.get(agent_id) or terminateds.get(ALL))
            truncated = bool(truncateds.get(agent_id) or truncateds.get(ALL))
            if terminated or truncated:
                trajectory.end(terminated, truncated, (infos.get(agent_id) or {}).get("outcome"))
                self._played[agent_id] += trajectory.num_steps > 0
                self.finished.append(trajectory)
                ended.append(trajectory)
            else:
                self.acting[agent_id] = ob
                mask = (infos.get(agent_id) or {}).get("action_mask")
                if mask is not None:
                    self.masks[agent_id] = mask
        return ended

    def take_chunks(self) -> list[dict[str, Any]]:
        """Every complete step as chunks, one per trajectory with any, of the agents sent
        (the others' steps are dropped); resets `ready_steps`."""
        trajectories = self.finished + [t for t in self.live.values() if not t.done]
        chunks = []
        for trajectory in trajectories:
            chunk = trajectory.take_chunk()
            if chunk is not None and trajectory in self._sent:
                chunk["obs"] = chunk["obs"].tolist()  # as the wire carries them
                chunks.append(chunk)
        self._sent.difference_update(self.finished)
        self.finished, self.ready_steps = [], 0
        return chunks


# --- What a run achieved -----------------------------------------------------------------


def _window(size: int) -> Callable[[], deque]:
    return lambda: deque(maxlen=size)


@dataclass
class SceneResult:
    """Counts, returns and outcomes of a run. A module's episode return is one agent's
    return in one episode (eight CartPole agents give eight returns per scene episode).
    Evaluation episodes (the mode, never trained on) are kept apart: the returns, outcomes,
    `episodes` and targets are the training episodes'; `evaluations` has theirs."""

    env_steps: int = 0  # scene steps
    agent_steps: int = 0  # actions of every agent, sent or not
    sent_steps: int = 0  # agent steps sent to the gateway (the sum of every send's `timesteps`)
    evaluated_steps: int = 0  # of the sent steps, those of evaluation episodes
    episodes: int = 0  # agent training episodes that ended, each giving one return
    evaluation_episodes: int = 0  # agent evaluation episodes that ended
    scene_episodes: int = 0  # times the whole scene ended (`__all__`) and was reset, evaluation episodes too
    evaluation_scene_episodes: int = 0  # of those, the evaluation ones
    seconds: float = 0.0
    weights_seq_no: int = 0
    module_returns: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(_window(RETURN_WINDOW)))
    agent_returns: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(_window(RETURN_WINDOW)))
    first_returns: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))  # first 20 per module
    outcomes: dict[str, deque[str]] = field(default_factory=lambda: defaultdict(_window(OUTCOME_WINDOW)))
    # module -> seat (agent id) -> its recent outcomes in that seat
    seat_outcomes: dict[str, dict[str, deque[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(_window(OUTCOME_WINDOW)))
    )
    # module -> (version, return) of each of its evaluation episodes (a version of the last chunk's, as the gateway counts)
    evaluations: dict[str, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    evaluation_outcomes: dict[str, deque[str]] = field(default_factory=lambda: defaultdict(_window(OUTCOME_WINDOW)))
    evaluation_seat_outcomes: dict[str, dict[str, deque[str]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(_window(OUTCOME_WINDOW)))
    )
    reached_target: bool = False

    def record(
        self, agent_id: str, module_id: str | None, episode_return: float, outcome: str | None,
        evaluation: bool = False, weights_seq_no: int = 0,
    ) -> None:
        """One agent's ended episode; `module_id` None for a local opponent (kept per agent only);
        an `evaluation` one (played by version `weights_seq_no`) apart from the training ones."""
        if evaluation:
            self.evaluation_episodes += 1
            if module_id is not None:
                self.evaluations[module_id].append((weights_seq_no, episode_return))
                if outcome is not None:
                    self.evaluation_outcomes[module_id].append(outcome)
                    self.evaluation_seat_outcomes[module_id][agent_id].append(outcome)
            return
        self.episodes += 1
        self.agent_returns[agent_id].append(episode_return)
        if module_id is None:
            return
        self.module_returns[module_id].append(episode_return)
        if len(self.first_returns[module_id]) < RETURN_WINDOW:
            self.first_returns[module_id].append(episode_return)
        if outcome is not None:
            self.outcomes[module_id].append(outcome)
            self.seat_outcomes[module_id][agent_id].append(outcome)

    def mean_return(self, module_id: str) -> float:
        """Mean of the module's last 20 episode returns (nan before the first)."""
        returns = self.module_returns.get(module_id)
        return float(np.mean(returns)) if returns else float("nan")

    def evaluation_return_mean(self, module_id: str) -> float:
        """Mean of the module's last 20 evaluation returns (nan before the first)."""
        recent = [episode_return for _, episode_return in self.evaluations.get(module_id, [])[-RETURN_WINDOW:]]
        return float(np.mean(recent)) if recent else float("nan")

    def outcome_counts(self, module_id: str, seat: str | None = None, *, evaluation: bool = False) -> dict[str, int]:
        """Wins, losses and draws among the module's last 100 outcomes of training episodes, or
        of evaluation ones (`evaluation`); in one seat, if named."""
        outcomes, seat_outcomes = self.outcomes, self.seat_outcomes
        if evaluation:
            outcomes, seat_outcomes = self.evaluation_outcomes, self.evaluation_seat_outcomes
        recent = list(outcomes.get(module_id, ()) if seat is None else seat_outcomes[module_id].get(seat, ()))
        return {outcome: recent.count(outcome) for outcome in ("win", "loss", "draw")}

    def reached(self, targets: dict[str, float]) -> bool:
        """Whether each module's last 20 returns (a full window) average at least its target."""
        return bool(targets) and all(
            len(self.module_returns.get(module_id, ())) == RETURN_WINDOW and self.mean_return(module_id) >= target
            for module_id, target in targets.items()
        )

    def summary(self) -> dict[str, Any]:
        """A JSON-able digest, for the CLI and logs."""
        return {
            "reached_target": self.reached_target,
            "env_steps": self.env_steps,
            "agent_steps": self.agent_steps,
            "sent_steps": self.sent_steps,
            "episodes": self.episodes,
            "evaluation_episodes": self.evaluation_episodes,
            "scene_episodes": self.scene_episodes,
            "seconds": round(self.seconds, 2),
            "weights_seq_no": self.weights_seq_no,
            "mean_return_last_20": {m: round(self.mean_return(m), 2) for m in self.module_returns},
            "first_20_mean_return": {m: round(float(np.mean(r)), 2) for m, r in self.first_returns.items() if r},
            "outcomes": {m: self.outcome_counts(m) for m in self.outcomes},
            "seat_outcomes": {m: {s: self.outcome_counts(m, s) for s in sorted(seats)} for m, seats in self.seat_outcomes.items()},
            **({"evaluation_return_mean_last_20": {m: round(self.evaluation_return_mean(m), 2) for m in self.evaluations}}
               if self.evaluations else {}),
            **({"evaluation_outcomes": {m: self.outcome_counts(m, evaluation=True) for m in self.evaluation_outcomes}}
               if self.evaluation_outcomes else {}),
        }


# --- The loop ----------------------------------------------------------------------------


def run_scene(
    client: RLlinkClient,
    env: MultiAgentEnv | Sequence[MultiAgentEnv],
    *,
    target_return: float | dict[str, float] | None = None,
    max_env_steps: int | None = None,
    max_seconds: float | None = None,
    seed: int = 0,
    stop: threading.Event | None = None,
    opponents: dict[str, Opponent] | None = None,
    module_filter: Collection[str] | None = None,
    seatings: Callable[[GatewayConfig], Sequence[Seating]] | None = None,
    scripted: Mapping[str, Opponent] | None = None,
    evaluation_interval: int | None = None,
) -> SceneResult:
    """Play `env` with the gateway's modules and train them until every targeted module's
    mean return (last 20 training episodes) reaches its target, a limit passes (`max_env_steps`
    counts scene steps), or `stop` is set; all are checked after each SET_STATE.

    `target_return`: one value for every module this client sends experience for, or
    `{module_id: target}`. `opponents`: `{agent_id_glob: obs -> action}` plays matching
    agents locally, unsent. `module_filter`: send only these modules' experience (the
    others are still played). `seatings(config)`: who plays which seat, game by game
    (`swapped_seatings`). `scripted`: `{name: (obs, mask) -> action}`, the players of the
    self-play league's scripted references (see ModulePolicies). Several envs (copies of one scene) are stepped side by side, each
    module's acting agents of all of them in one model call; env k is seeded `seed + k`
    and starts its seatings k games on, so that seats are shared out from the start.

    Every Nth episode of each env is an evaluation episode (RLLINK.md, "Evaluation episodes";
    `SceneCollector` says which): its agents that play a gateway module play the mode, local
    and scripted players as ever, and every chunk of it says `evaluation` (the gateway never
    trains on it and reports its return apart); N is SET_CONFIG's `evaluation_interval`
    unless `evaluation_interval` is given (0: none). Its returns stay out of the targets.
    """
    result, started = SceneResult(), time.monotonic()
    envs = list(env) if isinstance(env, Sequence) else [env]
    set_config = client.request({"type": "GET_CONFIG"})
    config = GatewayConfig.from_set_config(set_config)
    interval = int(set_config.get("evaluation_interval", 0) if evaluation_interval is None else evaluation_interval)
    castings = [Casting(config, opponents, module_filter, None if seatings is None else seatings(config)) for _ in envs]
    trained = castings[0].trained(envs[0].possible_agents)
    if not trained:
        raise ValueError(f"no agent of {envs[0].possible_agents} plays a module this client sends experience for")
    targets = _targets(target_return, trained)
    policies = ModulePolicies(config, np.random.default_rng(seed), scripted)
    policies.load(client.request({"type": "GET_STATE"}))
    collectors = [
        SceneCollector(
            scene, casting.sends, seed=seed + k, module_of=casting.module_id,
            on_game=lambda game, casting=casting, k=k: casting.start_game(game + k), evaluation_interval=interval,
            observed=casting.observed,
        )
        for k, (scene, casting) in enumerate(zip(envs, castings))
    ]
    while True:
        for collector, actions in zip(collectors, choose_actions_in(collectors, castings, policies)):
            for trajectory in collector.step(actions):
                result.record(
                    trajectory.agent_id, trajectory.module_id, trajectory.episode_return, trajectory.outcome,
                    trajectory.evaluation, min(trajectory.versions, default=policies.weights_seq_no),
                )
        if sum(collector.ready_steps for collector in collectors) < config.env_steps_per_sample:
            continue
        chunks = [chunk for collector in collectors for chunk in collector.take_chunks()]
        steps = sum(len(chunk["actions"]) for chunk in chunks)
        policies.load(client.request({"type": "EPISODES_AND_GET_STATE", "episodes": chunks, "timesteps": steps}))
        result.sent_steps += steps
        result.evaluated_steps += sum(len(chunk["actions"]) for chunk in chunks if chunk.get("evaluation"))
        result.env_steps = sum(collector.scene_steps for collector in collectors)
        result.agent_steps = sum(collector.agent_steps for collector in collectors)
        result.scene_episodes = sum(collector.scene_episodes for collector in collectors)
        result.evaluation_scene_episodes = sum(collector.evaluation_scene_episodes for collector in collectors)
        result.weights_seq_no = policies.weights_seq_no
        result.seconds = time.monotonic() - started
        _log_progress(result, trained)
        if result.reached(targets):
            result.reached_target = True
            return result
        if budget_spent(result.env_steps, result.seconds, max_env_steps, max_seconds, stop):
            return result


def _targets(target_return: float | dict[str, float] | None, trained: list[str]) -> dict[str, float]:
    if target_return is None:
        return {}
    if not isinstance(target_return, dict):
        return {module_id: float(target_return) for module_id in trained}
    unknown = set(target_return) - set(trained)
    if unknown:
        raise ValueError(f"target_return names {sorted(unknown)}, but this client trains only {trained}")
    return dict(target_return)


def choose_actions(
    acting: dict[str, Any],
    masks: dict[str, Any],
    casting: Casting,
    policies: ModulePolicies,
    *,
    explore: bool = True,
    evaluating: Collection[str] = (),
    states: Mapping[str, Any] | None = None,
    noises: Mapping[str, Any] | None = None,
) -> dict[str, PlayedAction]:
    """Every acting agent's action (among its mask's, if it has one): local opponents one by
    one (given the mask too, if there is one), each module in one batch (greedy unless
    `explore`; the agents in `evaluating`, of an evaluation episode, greedy anyway); a
    recurrent module's agents fed their `states` (`SceneCollector.states`; none: zeros), a
    pink-noise module's their noise processes (`SceneCollector.noises`; none: new ones)."""
    (actions,) = _choose([(acting, masks, casting, evaluating, states or {}, noises or {})], policies, explore)
    return actions


def choose_actions_in(
    collectors: Sequence[SceneCollector], castings: Sequence[Casting], policies: ModulePolicies, *, explore: bool = True
) -> list[dict[str, PlayedAction]]:
    """`choose_actions` for several scenes at once: each module's agents of all of them in one
    batch, those of an evaluation episode (`SceneCollector.evaluating`) with the mode."""
    scenes = [(c.acting, c.masks, casting, c.evaluating, c.states, c.noises) for c, casting in zip(collectors, castings)]
    return _choose(scenes, policies, explore)


def _choose(
    scenes: list[tuple[dict[str, Any], dict[str, Any], Casting, Collection[str], Mapping[str, Any], Mapping[str, Any]]],
    policies: ModulePolicies,
    explore: bool,
) -> list[dict[str, PlayedAction]]:
    actions: list[dict[str, PlayedAction]] = [{} for _ in scenes]
    by_module: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for k, (acting, masks, casting, *_) in enumerate(scenes):
        for agent_id, obs in acting.items():
            opponent = casting.opponent(agent_id)
            if opponent is None:
                by_module[casting.module(agent_id).module_id].append((k, agent_id))
            else:
                action = opponent(obs) if agent_id not in masks else opponent(obs, masks[agent_id])
                actions[k][agent_id] = PlayedAction(action, _chunk_action(action), 0.0, policies.weights_seq_no)
    for module_id, agents in by_module.items():
        observations = [scenes[k][0][agent_id] for k, agent_id in agents]
        explores = [explore and agent_id not in scenes[k][3] for k, agent_id in agents]
        masks = [scenes[k][1].get(agent_id) for k, agent_id in agents]
        states = [scenes[k][4].get(agent_id) for k, agent_id in agents]
        noises = [scenes[k][5].get(agent_id) for k, agent_id in agents]
        played = policies.act(module_id, observations, masks, explores, states, noises)
        for (k, agent_id), action in zip(agents, played):
            actions[k][agent_id] = action
    return actions


def _log_progress(result: SceneResult, modules: Iterable[str]) -> None:
    returns = "  ".join(f"{m} {result.mean_return(m):.1f} ({len(result.module_returns.get(m, ()))})" for m in modules)
    seats = "".join(
        f"  {m}@{seat} W/D/L {c['win']}/{c['draw']}/{c['loss']}"
        for m in modules
        for seat in sorted(result.seat_outcomes.get(m, ()))
        for c in [result.outcome_counts(m, seat)]
    )
    log.info(
        "v%d  scene steps %d  agent steps %d  episodes %d  mean return %s%s  %.1fs",
        result.weights_seq_no,
        result.env_steps,
        result.agent_steps,
        result.episodes,
        returns,
        seats,
        result.seconds,
    )


# --- `python -m rllink_clients.multi_agent` -------------------------------------------------

DEFAULT_PORTS = {"tcp": 5555, "ws": 8000}
GYM_SCENE_ENVS = {
    "cartpole": ("CartPole-v1", "cart"),
    "pendulum": ("Pendulum-v1", "pend"),
    "reach": (REACH_ENV_ID, "reach"),
}


def make_scene(spec: str) -> MultiAgentEnv:
    """`coordination`, `countdown`, or gymnasium envs with counts: `cartpole:8,pendulum:1`
    gives agents cart_0..cart_7 on CartPole-v1 and pend_0 on Pendulum-v1."""
    if spec == "coordination":
        return CoordinationGame()
    if spec == "countdown":
        return CountdownGame()
    agents = {}
    for part in spec.split(","):
        name, _, count = part.strip().partition(":")
        if name not in GYM_SCENE_ENVS or not (count or "1").isdigit():
            choices = "|".join(GYM_SCENE_ENVS)
            raise ValueError(f"unknown scene part {part!r}: use coordination, countdown, or {choices}:N,...")
        env_id, prefix = GYM_SCENE_ENVS[name]
        agents.update({f"{prefix}_{i}": env_id for i in range(int(count or 1))})
    return gymnasium_scene(agents)


def parse_target(text: str | None) -> float | dict[str, float] | None:
    """`450` (every trained module) or `cart=450,pend=-300`."""
    if text is None or "=" not in text:
        return None if text is None else float(text)
    return {module_id.strip(): float(value) for module_id, value in (item.split("=", 1) for item in text.split(","))}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m rllink_clients.multi_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=["tcp", "ws"], default="tcp")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="default: 5555 for tcp, 8000 for ws")
    parser.add_argument("--scene", default="cartpole:8", help="cartpole:N,pendulum:M,reach:K | coordination | countdown")
    parser.add_argument(
        "--target-return", help="stop when each trained module's mean of 20 returns reaches this (one number, or module=value,...)"
    )
    parser.add_argument(
        "--opponent", choices=["random", "optimal"], help="countdown: play player_1 locally with this policy (its experience is not sent)"
    )
    parser.add_argument("--max-env-steps", type=int, help="stop after this many scene steps")
    parser.add_argument("--max-seconds", type=float, help="stop after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--evaluation-interval", type=int, metavar="N",
        help="play every Nth episode of each env greedily as an evaluation episode (reported apart, never trained on; "
        "0: none); default: the gateway's SET_CONFIG evaluation_interval",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    target = parse_target(args.target_return)
    opponents = None
    if args.opponent is not None:
        if args.scene != "countdown":
            raise SystemExit("--opponent is for --scene countdown")
        play = (
            scripted_opponent
            if args.opponent == "optimal"
            else functools.partial(random_opponent, rng=np.random.default_rng(args.seed + 1))
        )
        opponents = {"player_1": play}
    try:
        client = RLlinkClient.open(args.transport, args.host, args.port or DEFAULT_PORTS[args.transport])
    except GatewayUnreachable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with client:
        result = run_scene(
            client,
            make_scene(args.scene),
            target_return=target,
            max_env_steps=args.max_env_steps,
            max_seconds=args.max_seconds,
            seed=args.seed,
            opponents=opponents,
            evaluation_interval=args.evaluation_interval,
        )
    print(json.dumps(result.summary()))
    return 0 if result.reached_target or target is None else 1


if __name__ == "__main__":
    sys.exit(main())
