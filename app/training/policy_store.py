"""The published versions: every module's policy at one gateway-wide weights_seq_no,
the current one and the last few kept for download."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

from app.schemas import SetState
from app.settings.env_params import EnvParamValue
from app.training.policy_state import PolicyState

KEPT_VERSIONS = 10  # recent versions kept for download (GET /api/model.onnx?version=)


@dataclass(frozen=True)
class PolicySetState:
    """One published version: each module's exported policy (a module not trained in
    that step keeps its previous export), the environment parameters' values when it was
    published, and the SET_STATE message that carries them."""

    weights_seq_no: int
    modules: dict[str, PolicyState]  # every module, opponents included
    default_module_id: str
    env_params: dict[str, EnvParamValue] = field(default_factory=dict)  # SET_CONFIG's
    # Whether SET_STATE carries env_params: every version published after a curriculum lesson changed.
    send_env_params: bool = False
    # The modules clients name that each slot plays as another (PolicySet.slot_modules): a population's module its
    # members (their exports are in `modules`; the module's is its best member's), a self-play learner its exploiter.
    slot_modules: dict[str, list[str]] = field(default_factory=dict)

    @property
    def default(self) -> PolicyState:
        return self.modules[self.default_module_id]

    def set_state_for(self, slot: int) -> SetState:
        """The SET_STATE of a client in `slot` (ClientInfo.slot): each of `slot_modules` as the
        module the slot falls on, under the name clients know (members and exploiters are not
        named). Built once per version and combination: without slot_modules every client gets
        the same message (and encoded frame)."""
        members = tuple(ids[slot % len(ids)] for ids in self.slot_modules.values())
        if (built := self._set_states.get(members)) is None:
            played = dict(zip(self.slot_modules, members))
            files = {
                module_id: self.modules[played.get(module_id, module_id)].onnx_gzip_b64
                for module_id in self.modules
                if module_id not in self._hidden
            }
            built = self._set_states[members] = SetState(
                onnx_file=files[self.default_module_id],
                weights_seq_no=self.weights_seq_no,
                onnx_files=files,
                env_params=dict(self.env_params) if self.send_env_params else None,
            )
        return built

    @cached_property
    def _set_states(self) -> dict[tuple[str, ...], SetState]:
        return {}

    @cached_property
    def _hidden(self) -> frozenset[str]:
        """The modules clients never name: those played under another's name only."""
        return frozenset(member for members in self.slot_modules.values() for member in members) - set(self.slot_modules)


class PolicyStore:
    """Each version is exported once (ONNX, gzip, base64) and served from here."""

    def __init__(self) -> None:
        self._current: PolicySetState | None = None
        self._kept: OrderedDict[int, PolicySetState] = OrderedDict()

    def publish(self, state: PolicySetState) -> None:
        """Make `state` the current version and keep it for download."""
        self._current = state
        self._kept[state.weights_seq_no] = state
        while len(self._kept) > KEPT_VERSIONS:
            self._kept.popitem(last=False)

    @property
    def current(self) -> PolicySetState:
        """The latest published version."""
        if self._current is None:
            raise RuntimeError("no policy version is published yet (TrainingService.start() has not run)")
        return self._current

    def kept(self, weights_seq_no: int) -> PolicySetState | None:
        """One of the last KEPT_VERSIONS versions, or None if it is not kept."""
        return self._kept.get(weights_seq_no)

    @property
    def kept_versions(self) -> list[int]:
        return list(self._kept)
