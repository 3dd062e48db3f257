"""The gateway's modules (policies) and which agent plays which: built once from the settings.

A module has its own spaces. A trainable module has its algorithm and that algorithm's
hyperparameters (and maybe self-play); each self-play module brings a frozen opponent
module that clients play but never send experience for. `module_for` decides which module
a chunk belongs to: its `module_id` if it names one, else the first `policy_mapping` glob
that matches its `agent_id` (fnmatch, case-sensitive), else, for a chunk with no agent, the
default module (the first declared), so single-agent clients work unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from app.settings.hyperparameters import (
    DEFAULT_MODULE_ID,
    MODULE_ID_PATTERN,
    NEVER_VARIED,
    ModelConfig,
    PolicyConfig,
    PopulationConfig,
    SelfPlayConfig,
    Symmetry,
    varied_scale,
)
from app.spaces.models import (
    ActionSpace,
    BoxSpace,
    DictSpace,
    DiscreteSpace,
    MultiDiscreteSpace,
    ObservationSpace,
    has_images,
    is_discrete,
)
from app.training.algorithms import ALGORITHMS, DEFAULT_ALGORITHM, Algorithm, supporting

DEFAULT_OPPONENT_TEMPERATURE = 2.0  # tic-tac-toe's plain league never lost to minimax with it (docs/multi-agent.md)

EXPLOITER_SUFFIX = ".exploiter"


def exploiter_id(module_id: str) -> str:
    """The module id of a self-play learner's main exploiter (SelfPlayConfig.exploiter)."""
    return module_id + EXPLOITER_SUFFIX


MAX_REMEMBERED_AGENTS = 100_000  # agent ids whose module is remembered (then forgotten all at once)


class ModuleSettings(Protocol):
    """What the modules are built from: the part of `Settings` (app/settings/config.py) that
    declares them, so that `Settings` can check them while it validates."""

    @property
    def policies(self) -> dict[str, PolicyConfig] | None: ...
    @property
    def policy_mapping(self) -> dict[str, str] | None: ...
    @property
    def observation_space(self) -> ObservationSpace: ...
    @property
    def action_space(self) -> ActionSpace: ...
    @property
    def algorithm(self) -> Algorithm: ...
    @property
    def action_masking(self) -> bool: ...
    @property
    def model(self) -> ModelConfig: ...
    def hyperparameters(self, algorithm: str) -> BaseModel: ...  # its section of that algorithm (`ppo`)


class UnknownModule(ValueError):
    """A chunk names, or its agent maps to, no module that can train on it."""


@dataclass(frozen=True)
class Module:
    """One policy: what it observes and does, how it trains (no config: a frozen opponent)."""

    module_id: str
    observation_space: BoxSpace | DictSpace
    action_space: ActionSpace
    config: BaseModel | None = None  # its algorithm's hyperparameters; None: a frozen self-play opponent, never trained
    self_play: SelfPlayConfig | None = None
    opponent_of: str | None = None  # the learner whose snapshots this opponent plays
    algorithm: str = DEFAULT_ALGORITHM  # a name of app/training/algorithms/ (an opponent: its learner's)
    action_masking: bool = False  # chunks and GET_ACTION may carry action_mask; the ONNX takes one
    train_batch_size: int | None = None  # env steps per training batch; None: the gateway's
    symmetries: tuple[Symmetry, ...] = ()  # the learner also trains on each step's images under these
    model: ModelConfig = field(default_factory=ModelConfig)  # its memory (use_lstm); an opponent's: its learner's
    population: PopulationConfig | None = None  # set: the module clients name, trained as these members (no learner of its own)
    member_of: str | None = None  # a population's member: the module its clients name

    def __post_init__(self) -> None:
        if self.action_masking and not is_discrete(self.action_space):
            raise ValueError(
                f"module {self.module_id!r}: action_masking needs a discrete or multi_discrete action space, "
                f"got {self.action_space.model_dump_json()}"
            )
        spec = ALGORITHMS[self.algorithm]
        if not any(ACTION_SPACES[kind][0](self.action_space) for kind in spec.action_spaces):
            needs = " or ".join(ACTION_SPACES[kind][1] for kind in spec.action_spaces)
            raise ValueError(f"module {self.module_id!r}: {self.algorithm} needs {needs}, got {self.action_space.model_dump_json()}")
        if self.action_masking and not spec.action_masking:
            where = supporting("action_masking")
            raise ValueError(f"module {self.module_id!r}: action_masking trains with {where} only; set algorithm {where} or drop the masks")
        if not spec.image_observations and has_images(self.observation_space):
            raise ValueError(
                f"module {self.module_id!r}: {self.algorithm} takes vector observations only; "
                f"train image observations with {supporting('image_observations')}"
            )
        if self.symmetries:
            self._check_symmetries()
        if self.model.use_lstm and not spec.recurrent:
            raise ValueError(
                f"module {self.module_id!r}: use_lstm trains with {supporting('recurrent')} only ({self.algorithm} has no "
                "memory here); set algorithm ppo or drop model.use_lstm"
            )
        if self.model.use_lstm and self.symmetries:
            raise ValueError(f"module {self.module_id!r}: symmetries are for feed-forward policies; drop them or model.use_lstm")
        if self.model.use_lstm and (self.self_play is not None or self.opponent_of is not None):
            raise ValueError(f"module {self.module_id!r}: self-play leagues are for feed-forward policies yet; drop model.use_lstm")
        if self.population is not None:
            self._check_population(self.population)
        if self.self_play is not None and self.self_play.opponent_temperature not in (None, 1) and not is_discrete(self.action_space):
            raise ValueError(
                f"module {self.module_id!r}: self_play.opponent_temperature divides logits (a discrete action space's); "
                "drop it for a Box"
            )
        exploiter = exploiter_id(self.module_id)
        if self.self_play is not None and self.self_play.exploiter is not None and not MODULE_ID_PATTERN.match(exploiter):
            raise ValueError(f"module {self.module_id!r}: its exploiter's id {exploiter!r} is too long; shorten the module id")

    @property
    def opponent_temperature(self) -> float:
        """The self-play opponent's temperature: as set, else 2 for a discrete action space and 1 for a Box."""
        chosen = self.self_play.opponent_temperature if self.self_play is not None else None
        return chosen if chosen is not None else DEFAULT_OPPONENT_TEMPERATURE if is_discrete(self.action_space) else 1.0

    @property
    def members(self) -> list[str]:
        """A population's member ids, `<module_id>.<k>`; none for another module."""
        return [] if self.population is None else [f"{self.module_id}.{k}" for k in range(self.population.size)]

    def _check_population(self, population: PopulationConfig) -> None:
        """PPO, feed-forward, no league; each varied hyperparameter one PATCH may change, its range valid for it."""
        where = f"module {self.module_id!r}: population"
        if self.algorithm != "ppo":
            raise ValueError(f"{where} trains with ppo only; set algorithm ppo or drop population")
        if self.self_play is not None:
            raise ValueError(f"{where} and self_play do not go together yet; drop one")
        if self.model.use_lstm:
            raise ValueError(f"{where} is for feed-forward policies yet; drop model.use_lstm")
        if not all(MODULE_ID_PATTERN.match(member) for member in self.members):
            raise ValueError(f"{where}: member id {self.members[-1]!r} is too long; shorten the module id")
        variable = [name for name in ALGORITHMS[self.algorithm].patch.model_fields if name not in NEVER_VARIED]
        for name, bounds in population.hyperparameters.items():
            if name not in variable:
                raise ValueError(f"{where} cannot vary {name!r}; it varies {', '.join(variable)}")
            if bounds.log and min(varied_scale(name, bounds.low), varied_scale(name, bounds.high)) <= 0:
                needs = "values below 1" if name == "gamma" else "positive values"
                raise ValueError(f"{where}.hyperparameters.{name}: a log range needs {needs}")
            for value in (bounds.low, bounds.high):
                try:
                    ALGORITHMS[self.algorithm].patch.model_validate({name: value})
                except ValidationError as exc:
                    raise ValueError(f"{where}.hyperparameters.{name}: {value} is not a valid {name} ({exc.errors()[0]['msg']})") from None

    @property
    def state_size(self) -> int:
        """Floats of one agent's recurrent state (RLLINK.md "Recurrent policies"); 0: feed-forward."""
        return self.model.state_size

    def _check_symmetries(self) -> None:
        """Each symmetry permutes this module's flat observation and its discrete actions (algorithms with `symmetries`: PPO)."""
        where = f"module {self.module_id!r}: symmetries"
        if not ALGORITHMS[self.algorithm].symmetries:
            trains = supporting("symmetries")
            raise ValueError(f"{where} train with {trains} only; set algorithm {trains} or drop them")
        if not isinstance(self.action_space, DiscreteSpace):
            raise ValueError(f"{where} need a discrete action space, got {self.action_space.model_dump_json()}")
        flat_dim, n = self.observation_space.flat_dim, self.action_space.n
        for i, symmetry in enumerate(self.symmetries):
            if len(symmetry.observation) != flat_dim:
                raise ValueError(f"{where}[{i}].observation has {len(symmetry.observation)} indices; the observation has {flat_dim} values")
            if len(symmetry.action) != n:
                raise ValueError(f"{where}[{i}].action has {len(symmetry.action)} indices; the action space has {n} actions")

    @property
    def trainable(self) -> bool:
        """Clients send experience for it (a population's module too: its members train on it)."""
        return self.opponent_of is None

    @property
    def off_policy(self) -> bool:
        """Trains from a replay buffer: its experience is never stale, its clients never wait."""
        return ALGORITHMS[self.algorithm].off_policy

    @property
    def action_distribution(self) -> str:
        """How clients turn the model's output into an action (RLLINK.md, "Action distributions")."""
        if isinstance(self.action_space, DiscreteSpace):
            return "categorical"
        if isinstance(self.action_space, MultiDiscreteSpace):
            return "multi_categorical"
        return ALGORITHMS[self.algorithm].box_distribution


    @property
    def action_noise(self) -> str:
        """The N(0, 1) draws clients sample a Box action with: "pink" for a SAC module that
        explores so (its `exploration`), else "white" (the docs' "Exploration noise")."""
        pink = getattr(self.config, "exploration", None) == "pink" and isinstance(self.action_space, BoxSpace)
        return "pink" if pink else "white"


def _bounded_box(space: ActionSpace) -> bool:
    return (
        isinstance(space, BoxSpace)
        and space.low is not None
        and space.high is not None
        and math.isfinite(space.low)
        and math.isfinite(space.high)
        and space.low < space.high
    )


ACTION_SPACES: dict[str, tuple[Callable[[ActionSpace], bool], str]] = {  # AlgorithmSpec.action_spaces: test, and as said
    "discrete": (lambda space: isinstance(space, DiscreteSpace), "a discrete action space"),
    "multi_discrete": (lambda space: isinstance(space, MultiDiscreteSpace), "a multi_discrete action space"),
    "box": (lambda space: isinstance(space, BoxSpace), "a box action space"),
    "bounded_box": (_bounded_box, "a box with finite low and high (its squashed Gaussian is scaled to them)"),
}


def hyperparameters(settings: ModuleSettings, algorithm: str, module_id: str) -> BaseModel:
    """The hyperparameters `algorithm` trains module `module_id` with: the settings' section of
    that name, with the module's own in `policies` and, for a self-play learner, the algorithm's
    self-play defaults where the value is still the config's default (PPO's entropy_floor, gamma,
    ...: so a snapshot of the settings, which writes every value, builds the same modules)."""
    spec, section = ALGORITHMS[algorithm], settings.hyperparameters(algorithm)
    policy = None if settings.policies is None else settings.policies.get(module_id)
    if policy is None:
        return section
    cfg = spec.config.model_validate({**section.model_dump(), **getattr(policy, algorithm)})
    fields = spec.config.model_fields
    if policy.self_play is not None and (
        unset := {k: v for k, v in spec.self_play_defaults.items() if getattr(cfg, k) == fields[k].default}
    ):
        cfg = spec.config.model_validate({**cfg.model_dump(), **unset})
    return cfg


class PolicySet:
    """Every module of one gateway, in declaration order, and the agent mapping."""

    def __init__(self, modules: list[Module], mapping: dict[str, str] | None = None) -> None:
        if not modules:
            raise ValueError("a gateway needs at least one module")
        self.modules: dict[str, Module] = {}
        for module in modules:
            if module.module_id in self.modules:
                raise ValueError(f"module id {module.module_id!r} is declared twice")
            self.modules[module.module_id] = module
        self.mapping = dict(mapping or {})
        for glob, module_id in self.mapping.items():
            if module_id not in self.modules:
                raise ValueError(
                    f"policy_mapping maps {glob!r} to {module_id!r}, which is not a module; "
                    f"modules: {', '.join(self.modules)}"
                )
        self.default_module_id = modules[0].module_id
        self.slot_modules = self._slot_modules()  # ids and configs never change (`replace` swaps spaces only)
        self._mapped: dict[str, Module | None] = {}  # agent_id -> its module: globs matched once per agent
        self._trainable: dict[Any, Module] = {}  # module_for's answers, by agent_id or (agent_id, module_id) (modules_for)

    @classmethod
    def single(cls, observation_space: BoxSpace | DictSpace, action_space: ActionSpace, config: BaseModel | None = None) -> PolicySet:
        """One trainable module, `default_policy`, that every agent plays, trained with the default algorithm (PPO)."""
        config = config or ALGORITHMS[DEFAULT_ALGORITHM].config()
        return cls([Module(DEFAULT_MODULE_ID, observation_space, action_space, config)])

    @classmethod
    def from_settings(cls, settings: ModuleSettings) -> PolicySet:
        """The modules of `policies` (each self-play one followed by its opponent), or the single default module."""
        if settings.policies is None:
            module = Module(
                DEFAULT_MODULE_ID, settings.observation_space, settings.action_space,
                settings.hyperparameters(settings.algorithm), algorithm=settings.algorithm,
                action_masking=settings.action_masking, model=settings.model,
            )
            return cls([module], settings.policy_mapping)
        modules = []
        for module_id, policy in settings.policies.items():
            algorithm = policy.algorithm or settings.algorithm
            masking = policy.action_masking
            if masking is None:  # the gateway's setting, where it can apply
                masking = settings.action_masking and is_discrete(policy.action_space)
            modules.append(
                Module(
                    module_id, policy.observation_space, policy.action_space,
                    hyperparameters(settings, algorithm, module_id), policy.self_play,
                    algorithm=algorithm, action_masking=masking, train_batch_size=policy.train_batch_size,
                    symmetries=tuple(policy.symmetries), model=policy.model or settings.model, population=policy.population,
                )
            )
            head = modules[-1]
            modules += [replace(head, module_id=member, population=None, member_of=module_id) for member in head.members]
            if policy.self_play is not None:
                opponent_id = policy.self_play.opponent_module_id or f"{module_id}_opponent"
                modules.append(
                    Module(
                        opponent_id, policy.observation_space, policy.action_space, opponent_of=module_id,
                        algorithm=algorithm, action_masking=masking, model=policy.model or settings.model,
                    )
                )
            if policy.self_play is not None and policy.self_play.exploiter is not None:
                modules.append(replace(head, module_id=exploiter_id(module_id), self_play=None, member_of=module_id))
        return cls(modules, settings.policy_mapping)

    @property
    def default(self) -> Module:
        return self.modules[self.default_module_id]

    @property
    def trainable(self) -> list[Module]:
        """The modules that learn, each with a learner of its own: a population's members, not its module."""
        return [module for module in self.modules.values() if module.trainable and module.population is None]

    @property
    def populations(self) -> dict[str, list[str]]:
        """Each population's module id and its members' ids."""
        return {module.module_id: module.members for module in self.modules.values() if module.population is not None}

    @property
    def client_modules(self) -> list[Module]:
        """The modules clients play and name: all but populations' members and exploiters."""
        return [module for module in self.modules.values() if module.member_of is None]

    def _slot_modules(self) -> dict[str, list[str]]:
        """The modules clients name whose part depends on the client's slot (ClientInfo.slot): the
        ids that play it, slot after slot, round. A population's module: its members. A self-play
        learner with an exploiter: itself, but the exploiter every `every`-th slot, where its
        opponent module plays the learner's latest weights."""
        played: dict[str, list[str]] = dict(self.populations)
        for module in self.modules.values():
            if module.self_play is not None and module.self_play.exploiter is not None:
                others = module.self_play.exploiter.every - 1
                played[module.module_id] = [module.module_id] * others + [exploiter_id(module.module_id)]
                opponent = next(m.module_id for m in self.modules.values() if m.opponent_of == module.module_id)
                played[opponent] = [opponent] * others + [module.module_id]
        return played

    @property
    def slot_cycle(self) -> int:
        """After how many slots the longest of `slot_modules` comes round again (1 without any)."""
        return max(map(len, self.slot_modules.values()), default=1)

    def played_by(self, module_id: str, slot: int) -> str:
        """`member_for`, by id."""
        return self.member_for(self.modules[module_id], slot).module_id

    def member_for(self, module: Module, slot: int) -> Module:
        """The module that trains and acts for a client in `slot` (ClientInfo.slot) where it
        names `module`: the one `slot_modules` gives; any other module is its own."""
        played = self.slot_modules.get(module.module_id)
        return module if played is None else self.modules[played[slot % len(played)]]

    def module_for(self, agent_id: str | None, module_id: str | None = None) -> Module:
        """The trainable module a chunk of `agent_id` (or naming `module_id`) belongs to.

        Raises UnknownModule, with a message naming the agent or module, when there is
        none or when it is a frozen opponent.
        """
        module = self.module_to_play(agent_id, module_id)
        if not module.trainable:
            raise UnknownModule(
                f"module {module.module_id!r} is the frozen self-play opponent of {module.opponent_of!r}: clients play it "
                f"but send only the experience of agents that play {module.opponent_of!r}"
            )
        return module

    def modules_for(self, agent_ids: list[str | None], module_ids: list[str | None]) -> list[Module]:
        """`module_for` of each chunk's agent_id and module_id, remembered: a scene's agents are
        in every message it sends (app.sansio.chunk_columns). Raises UnknownModule as it does.
        Where no chunk names a module (a scene, mostly), the keys are the agent ids: a string
        hashes once, a tuple at every lookup."""
        keys: list[Any] = agent_ids if module_ids.count(None) == len(module_ids) else list(zip(agent_ids, module_ids))
        remembered = self._trainable
        missing = set(keys).difference(remembered)
        if len(remembered) + len(missing) > MAX_REMEMBERED_AGENTS:
            remembered.clear()
            missing = set(keys)
        for key in missing:
            remembered[key] = self.module_for(*key) if type(key) is tuple else self.module_for(key)
        return list(map(remembered.__getitem__, keys))

    def module_to_play(self, agent_id: str | None, module_id: str | None = None) -> Module:
        """The module that acts for `agent_id` (or `module_id`), frozen opponents included.
        Raises UnknownModule when there is none."""
        if module_id is not None:
            module = self.modules.get(module_id)
            if module is None:
                raise UnknownModule(f"module_id {module_id!r} is not a module of this gateway; modules: {', '.join(self.modules)}")
            return module
        if agent_id is None:
            return self.default
        module = self.mapped_module(agent_id)
        if module is None:
            raise UnknownModule(
                f"agent {agent_id!r} maps to no module: no policy_mapping glob matches it "
                f"({', '.join(self.mapping) or 'policy_mapping is unset'}); add one, or send module_id"
            )
        return module

    def mapped_module(self, agent_id: str) -> Module | None:
        """The module of the first glob matching `agent_id`; with one module and no mapping, that module."""
        if agent_id in self._mapped:
            return self._mapped[agent_id]
        if len(self._mapped) >= MAX_REMEMBERED_AGENTS:
            self._mapped.clear()
        module = self._mapped[agent_id] = self._match(agent_id)
        return module

    def replace(self, module: Module) -> None:
        """Put `module` in the place of the module of its id (a module that adopts the spaces a
        game declared: app/training/service.py); every holder of this set sees it at once."""
        if module.module_id not in self.modules:
            raise ValueError(f"no module {module.module_id!r} to replace")
        self.modules[module.module_id] = module
        self._mapped.clear()  # they remembered the module it replaces
        self._trainable.clear()

    def _match(self, agent_id: str) -> Module | None:
        for glob, module_id in self.mapping.items():
            if fnmatchcase(agent_id, glob):
                return self.modules[module_id]
        if not self.mapping and len(self.modules) == 1:
            return self.default
        return None


def indices_by_module(modules: Sequence[Module]) -> list[list[int]]:
    """The positions of `modules` grouped by module, in order of first appearance (one
    group per module a batch of requests or chunks touches)."""
    if len(set(map(id, modules))) == 1:  # one module (a scene of one kind of agent): at C speed
        return [list(range(len(modules)))]
    groups: dict[str, list[int]] = {}
    for i, module in enumerate(modules):
        groups.setdefault(module.module_id, []).append(i)
    return list(groups.values())
