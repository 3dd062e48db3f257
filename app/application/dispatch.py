"""What each RLlink request does: the application behind the pump.

The pump (app/transport/connection.py) hands every request the session parsed to
`Application.handle`, in arrival order, and sends back what it returns. Experience goes to
the training service, thin clients' steps to the serving service; `SET_CONFIG` and
`SET_STATE` are built here. A request that brings experience is not done (no reply, and
the pump reads nothing more from its client) until the training service has room for more
(`wait_for_room`): that is the back-pressure on a client faster than the learner. Connection limits and the token check are admission's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from app.application.admission import admission_error, token_matches
from app.application.declared_spaces import declared_mismatch, spaces_to_adopt
from app.sansio.protocol import ReplyEncoder, Session
from app.schemas import (
    Action,
    EndEpisode,
    EpisodeChunk,
    Episodes,
    EpisodesAndGetState,
    EpisodeStarted,
    GetAction,
    GetConfig,
    GetState,
    LogAction,
    LogReturns,
    Ping,
    PolicyDescription,
    Pong,
    Request,
    SetConfig,
    SetState,
    StartEpisode,
)
from app.serving.service import ServingService
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.spaces.onnx_names import ACTION_MASK_INPUT
from app.training.interface import TrainingService
from app.training.policy_store import PolicySetState
from app.training.registry import ClientInfo
from rllink.errors import ErrorCode, ProtocolError

Reply = Pong | SetConfig | SetState | EpisodeStarted | Action


class Application:
    """The requests of every connection, on either transport, to the two services."""

    def __init__(
        self, settings: Settings, policies: PolicySet, training: TrainingService, serving: ServingService, replies: ReplyEncoder
    ) -> None:
        self.settings = settings
        self._policies = policies
        self._training = training
        self._serving = serving
        self._replies = replies  # encodes the replies many clients get alike once

    # -- A connection's life

    def admission_error(self, transport: str) -> ProtocolError | None:
        """Why a new connection on `transport` is refused now, or None."""
        return admission_error(self.settings, self._training.clients_here, transport)

    def new_session(self, authenticated: bool) -> Session:
        """The protocol state of a new connection; `authenticated` False: the token must come in a PING."""
        settings = self.settings
        return Session(
            self._policies,
            settings.max_frame_bytes,
            settings.max_episodes_per_message,
            settings.max_steps_per_message,
            settings.max_actions_per_message,
            check_token=None if authenticated else lambda token: token_matches(settings, token),
            encoder=self._replies,
        )

    def connect(self, transport: str, peer: str) -> ClientInfo:
        return self._training.connect(transport, peer)

    def keep(self, client: ClientInfo, episodes: Sequence[EpisodeChunk]) -> None:
        """Episodes that arrived whole but were never answered (the client left): trained all the same."""
        self._training.ingest(client, episodes)

    def disconnect(self, client: ClientInfo) -> None:
        self._serving.disconnect(client)
        self._training.disconnect(client)

    # -- Requests

    async def handle(self, client: ClientInfo, request: Request) -> Reply | None:
        """The reply to `request` (None: it gets none); a refusal raises ProtocolError."""
        received_at = time.perf_counter()
        training, serving = self._training, self._serving
        match request:
            case Ping():
                return Pong()
            case GetConfig():
                await self._take_declared_spaces(request)
                training.start_sampling(client)
                return self.set_config()
            case GetState():
                return self._set_state(client, training.current_state())
            case EpisodesAndGetState():
                training.ingest(client, request.episodes)
                if training.must_wait():
                    await training.wait_for_training(client)
                await training.wait_for_room(client)
                return self._set_state(client, training.current_state())
            case Episodes():
                training.ingest(client, request.episodes)
                await training.wait_for_room(client)  # meanwhile nothing more is read from the client
                return None
            case StartEpisode():
                return serving.start_episode(client, request)
            case GetAction():
                action = await serving.get_action(client, request, received_at)
                await training.wait_for_room(client)  # a thin client faster than the learner waits for its action
                return action
            case LogAction():
                await serving.log_action(client, request)
                await training.wait_for_room(client)
                return None
            case LogReturns():
                serving.log_returns(client, request)
                return None
            case EndEpisode():
                serving.end_episode(client, request)
                await training.wait_for_room(client)
                return None
        raise AssertionError(f"unhandled request {request!r}")  # pragma: no cover

    async def _take_declared_spaces(self, request: GetConfig) -> None:
        """The spaces the game declares: adopted by a module that was given none and has seen no
        experience yet (the first game's win), else checked (a mismatch raises its refusal)."""
        adoption = self._training.adoption  # None on Ray
        if adoption is not None:
            await adoption.settled()  # another game's adoption under way: its spaces come with its model
        adoptable = frozenset() if adoption is None else adoption.adoptable_modules - self._serving.modules_played
        for module_id, spaces in spaces_to_adopt(request, self._policies, adoptable).items():
            assert adoption is not None  # a module to adopt spaces is one of its adoptable_modules
            try:
                await adoption.adopt(module_id, spaces.observation_space, spaces.action_space)
            except ValueError as exc:
                raise ProtocolError(
                    ErrorCode.INVALID_MESSAGE, f"module {module_id!r} cannot adopt the spaces the game declares: {exc}"
                ) from None
        if (mismatch := declared_mismatch(request, self._policies)) is not None:
            raise mismatch

    def set_config(self) -> SetConfig:
        """Every module's spaces and ONNX names, the mapping, the sampling settings, the environment parameters."""
        settings, policies, status = self.settings, self._policies, self._training.status()
        described = {
            module.module_id: PolicyDescription(
                observation_space=module.observation_space,
                action_space=module.action_space,
                onnx_input_name=settings.onnx_input_name,
                onnx_output_names=status.onnx_output_names,
                onnx_action_mask_input_name=ACTION_MASK_INPUT if module.action_masking else None,
                action_distribution=module.action_distribution,
                action_noise=module.action_noise,
                state_size=module.state_size,
                trainable=module.trainable,
            )
            for module in policies.client_modules  # a population's members are not named: its module is
        }
        default = described[policies.default_module_id]
        return SetConfig(
            env_steps_per_sample=settings.env_steps_per_sample,
            force_on_policy=status.force_on_policy,
            **default.model_dump(exclude={"trainable"}),
            policies=described,
            policy_mapping=policies.mapping,
            default_module_id=policies.default_module_id,
            env_params=dict(self._training.current_state().env_params),  # the lessons' values as last published
            evaluation_interval=settings.evaluation_interval,
        )

    def _set_state(self, client: ClientInfo, state: PolicySetState) -> SetState:
        self._training.note_state_sent(client, state)
        return state.set_state_for(client.slot)  # a population's module as the member the client plays
