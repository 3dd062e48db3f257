"""The training service as the rest of the gateway sees it.

Two classes implement it: `LocalTrainingService` (app/training/service.py), which trains in
this process, and a Ray front-end's `RemoteTrainingService` (app/cluster/remote_service.py),
which forwards to the learner actor. Transports, the application, serving and REST are
typed against this protocol only; tests/test_service_interface.py checks both against it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.hyperparameters import PPOConfig, SACConfig
from app.settings.policies import PolicySet
from app.training.metrics import TrainingMetrics
from app.training.policy_store import PolicySetState
from app.training.registry import ClientInfo
from app.training.self_play import League


class TrainingService(Protocol):
    """Experience in, policy versions out, for every module; clients and configs in between."""

    settings: Settings
    policies: PolicySet

    # -- Lifecycle
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def add_step_listener(self, listener: Callable[[], None]) -> None:
        """`listener` runs after every training step (the metrics history, TensorBoard)."""

    # -- Clients
    def connect(self, transport: str, peer: str) -> ClientInfo: ...
    def disconnect(self, client: ClientInfo) -> None: ...
    def start_sampling(self, client: ClientInfo) -> None: ...
    @property
    def clients(self) -> list[ClientInfo]:
        """Every connected client (on Ray: of every front-end)."""
    @property
    def clients_here(self) -> list[ClientInfo]:
        """The clients of this process (the connection limits count these)."""

    # -- Experience and versions
    def ingest(self, client: ClientInfo, episodes: Sequence[EpisodeChunk], sampling: bool = True) -> None: ...
    def stop_training(self, module_id: str, reason: str) -> None:
        """The module trains no more; the steps that come for it are dropped under `reason`."""
    def curriculum_status(self) -> dict[str, dict[str, Any]]:
        """Each env_params curriculum's lesson now (app/training/curriculum.py), by parameter."""
    def must_wait(self) -> bool:
        """Whether a client that sent episodes waits for the next version (force_on_policy)."""
    async def wait_for_training(self, client: ClientInfo) -> PolicySetState: ...
    async def wait_for_room(self, client: ClientInfo) -> None:
        """Wait while the modules the client feeds hold as much experience as they may (back-pressure)."""
    def current_state(self) -> PolicySetState: ...
    def note_state_sent(self, client: ClientInfo, state: PolicySetState) -> None: ...
    def kept_state(self, weights_seq_no: int) -> PolicySetState | None: ...
    @property
    def kept_versions(self) -> list[int]: ...
    @property
    def onnx_output_names(self) -> list[str]: ...

    # -- Spaces a game declares
    @property
    def adoptable_modules(self) -> frozenset[str]:
        """The modules that would adopt a game's declared spaces (none on Ray)."""
    async def adopt_spaces(self, module_id: str, observation_space: Any, action_space: Any) -> bool:
        """The module takes a game's spaces (None: keeps its own); False if another was first."""

    # -- Progress
    @property
    def metrics(self) -> TrainingMetrics: ...
    @property
    def leagues(self) -> Mapping[str, League]: ...
    @property
    def pending_env_steps(self) -> int: ...
    @property
    def training_env_steps(self) -> int: ...
    @property
    def training_in_progress(self) -> bool: ...
    @property
    def force_on_policy(self) -> bool: ...
    @property
    def device(self) -> str: ...

    # -- Hyperparameters
    @property
    def ppo_config(self) -> PPOConfig: ...
    def module_ppo_config(self, module_id: str) -> PPOConfig: ...
    def module_sac_config(self, module_id: str) -> SACConfig | None: ...
    def algorithm_of(self, module_id: str) -> str: ...
    def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Apply (module_id, algorithm, values) changes, all or none (ConfigRefused)."""
