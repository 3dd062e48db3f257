"""The composition root: builds one gateway's parts from its settings, starts and stops them.

REST routes and the WebSocket route reach the parts through one `Gateway` (FastAPI's
dependency `get_gateway`); the transports themselves get only the `ConnectionContext`
every connection shares. `start` fails with a `StartupError` whose text is one line
saying what to do.
"""

from __future__ import annotations

import errno
import logging
import socket

from app.rllink.protocol import ReplyEncoder
from app.schemas import ARRAY_FIELDS
from app.serving.service import ServingService
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.settings.runs import RunExists, prepare_run
from app.tcp_bridge import TcpBridge
from app.telemetry.history import MetricsHistory
from app.telemetry.tensorboard import TensorBoardLog
from app.telemetry.traffic import TrafficStats
from app.training.checkpoints import CheckpointMismatch
from app.training.interface import TrainingService
from app.training.service import LocalTrainingService
from app.application.dispatch import Application
from app.transport.connection import ConnectionContext
from app.transport.decode_workers import DecodeWorkers

log = logging.getLogger("app.gateway")


class StartupError(Exception):
    """The gateway cannot start; the message says why and what to change, in one line."""


class Gateway:
    """Settings, the modules, the training and serving services, the application, traffic
    counters, decode workers and the TCP bridge."""

    def __init__(self, settings: Settings, service: TrainingService | None = None) -> None:
        """`service`: the training service to serve (on Ray, a front-end's stand-in for the
        learner actor, app/cluster/); by default the gateway trains in this process."""
        self.settings = settings
        self.policies = PolicySet.from_settings(settings)
        try:
            self.service = service if service is not None else LocalTrainingService(settings, self.policies)
        except ValueError as exc:  # e.g. a device torch does not have
            raise StartupError(str(exc)) from None
        self.serving = ServingService(settings, self.policies, self.service, seed=settings.seed)
        self.traffic = TrafficStats()
        self.history = MetricsHistory()  # filled at every training step (app/main.py wires it)
        self.board: TensorBoardLog | None = None  # event files, with tensorboard_dir (opened by start)
        self.decoders = DecodeWorkers(settings.decode_workers, ARRAY_FIELDS, reply_timeout_s=settings.decode_timeout_s)
        self.application = Application(settings, self.policies, self.service, self.serving, ReplyEncoder())
        self.connections = ConnectionContext(
            self.application, self.decoders, self.traffic, settings.frame_timeout_s, settings.idle_timeout_s
        )
        self.tcp_bridge = TcpBridge(self.connections, settings) if settings.tcp_enabled else None
        self.started = False

    async def start(self) -> None:
        """Restore the policy, start the decode workers and the TCP bridge."""
        try:
            prepare_run(self.settings)
        except (RunExists, OSError) as exc:
            raise StartupError(str(exc)) from None
        try:
            await self.service.start()
        except CheckpointMismatch as exc:
            raise StartupError(str(exc)) from None
        if self.settings.tensorboard_dir is not None:
            try:
                self.board = TensorBoardLog(self.settings.tensorboard_dir, self.service.metrics.num_env_steps_trained_lifetime)
            except OSError as exc:
                await self.service.stop()
                raise StartupError(f"cannot write TensorBoard event files in {self.settings.tensorboard_dir}: {exc.strerror or exc}") from None
        self.serving.start()
        try:
            await self.decoders.start()
            if self.tcp_bridge is not None:
                await self._start_tcp_bridge(self.tcp_bridge)
        except BaseException:
            await self._stop_parts()
            raise
        self.started = True

    async def _start_tcp_bridge(self, bridge: TcpBridge) -> None:
        settings = self.settings
        try:
            await bridge.start()
        except OSError as exc:
            where = f"{settings.tcp_bind_host}:{settings.tcp_port}"
            if exc.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"TCP port {where} is already in use: stop the program using it, or choose another "
                    "port with --tcp-port (0 picks a free one; --no-tcp-enabled turns the bridge off)"
                ) from None
            if settings.tls_enabled and not isinstance(exc, socket.gaierror) and exc.errno != errno.EADDRNOTAVAIL:
                raise StartupError(
                    f"cannot load the TLS certificate {settings.tls_certfile} and key {settings.tls_keyfile}: "
                    f"{exc.strerror or exc}; check --tls-certfile and --tls-keyfile"
                ) from None
            raise StartupError(f"cannot listen for RLlink over TCP on {where}: {exc.strerror or exc}; check --tcp-host and --tcp-port") from None

    async def stop(self) -> None:
        """Close every connection, keep what they sent, save the policy."""
        if not self.started:
            return
        self.started = False
        await self._stop_parts()
        log.info("gateway stopped")

    async def _stop_parts(self) -> None:
        if self.tcp_bridge is not None:
            await self.tcp_bridge.stop()
        await self.decoders.stop()
        await self.serving.stop()
        await self.service.stop()
        if self.board is not None:
            self.board.close()
