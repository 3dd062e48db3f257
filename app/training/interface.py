"""The training service as the rest of the gateway sees it.

Two classes implement it: `LocalTrainingService` (app/training/service.py), which trains in
this process, and a Ray front-end's `RemoteTrainingService` (app/cluster/remote_service.py),
which forwards to the learner actor. Transports, the application, serving and REST are
typed against this protocol only; tests/test_service_interface.py checks both against it.
What REST shows of progress and hyperparameters is one value, `status()` (status.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from app.schemas import EpisodeChunk
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.training.metrics import TrainingMetrics
from app.training.policy_store import PolicySetState
from app.training.registry import ClientInfo
from app.training.status import TrainingStatus

if TYPE_CHECKING:
    from app.training.space_adoption import SpaceAdoption


class LearnerUnreachable(RuntimeError):
    """The learner (on Ray: another process) did not answer in time; it may still make the change."""


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
    def clients_here(self) -> list[ClientInfo]:
        """The clients of this process (the connection limits count these)."""

    # -- Experience and versions
    def ingest(self, client: ClientInfo, episodes: Sequence[EpisodeChunk], sampling: bool = True) -> None: ...
    def stop_training(self, module_id: str, reason: str) -> None:
        """The module trains no more; the steps that come for it are dropped under `reason`."""
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

    # -- Progress and hyperparameters
    @property
    def metrics(self) -> TrainingMetrics: ...
    def status(self) -> TrainingStatus:
        """Steps pending and in training, every client, leagues, lessons, hyperparameters (on Ray: as last polled)."""
    def change_config(self, changes: list[tuple[str, str, dict[str, Any]]]) -> None:
        """Apply (module_id, algorithm, values) changes, all or none (ConfigRefused; LearnerUnreachable on Ray)."""

    # -- Spaces a game declares
    @property
    def adoption(self) -> SpaceAdoption | None:
        """The modules that would adopt a game's declared spaces, and their adopting them (None on Ray: checked only)."""
