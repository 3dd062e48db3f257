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

from app.application.dispatch import Application
from app.sansio.protocol import ReplyEncoder
from app.schemas import ARRAY_FIELDS
from app.serving.service import ServingService
from app.settings.config import Settings
from app.settings.policies import PolicySet
from app.settings.runs import RunExists, prepare_run
from app.telemetry.history import MetricsHistory
from app.telemetry.tensorboard import TensorBoardLog
from app.telemetry.traffic import TrafficStats
from app.training.checkpoints import CheckpointMismatch, with_adopted_spaces
from app.training.interface import TrainingService
from app.training.service import LocalTrainingService
from app.transport.connection import ConnectionContext
from app.transport.decode_workers import DecodeWorkers
from app.transport.tcp import TcpBridge

log = logging.getLogger("app.gateway")


class StartupError(Exception):
    """The gateway cannot start; the message says why and what to change, in one line."""


class PortsInUse(StartupError):
    """Ports other programs listen on: the message names every one, and the flags that move them.

    `ports`: (what, where) pairs, what being "HTTP" or "TCP" (its flag: --http-port,
    --tcp-port) and where "host:port". `PortsInUse.joined` makes one error of several,
    so that one try names every port to change. (The ports are its args: it pickles as
    they are, for Ray to send a front-end's error to the driver.)
    """

    def __init__(self, *ports: tuple[str, str]) -> None:
        super().__init__(*ports)
        self.ports = ports

    @classmethod
    def joined(cls, errors: list[PortsInUse]) -> PortsInUse:
        return cls(*(port for error in errors for port in error.ports))

    def __str__(self) -> str:
        named = " and ".join(f"{what} port {where}" for what, where in self.ports)
        flags = " and ".join(f"--{what.lower()}-port" for what, _ in self.ports)
        hints = "0 picks a free one" + ("; --no-tcp-enabled turns the bridge off" if any(what == "TCP" for what, _ in self.ports) else "")
        if len(self.ports) == 1:
            return f"{named} is already in use: stop the program using it, or choose another port with {flags} ({hints})"
        return f"{named} are already in use: stop the programs using them, or choose other ports with {flags} ({hints})"


class Gateway:
    """Settings, the modules, the training and serving services, the application, traffic
    counters, decode workers and the TCP bridge."""

    def __init__(self, settings: Settings, service: TrainingService | None = None) -> None:
        """`service`: the training service to serve (on Ray, a front-end's stand-in for the
        learner actor, app/cluster/); by default the gateway trains in this process."""
        try:
            settings = with_adopted_spaces(settings)  # those a game gave the default module in an earlier start
            self.settings = settings
            self.policies = PolicySet.from_settings(settings)
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

    def check_tcp_port(self) -> None:
        """Fail now if the TCP bridge could not listen where it should (`PortsInUse` when the
        port is taken), before anything starts. The port is only tried, not kept: `start`
        binds it for real and fails the same way if it was taken in between."""
        if self.tcp_bridge is None:
            return
        try:
            self.tcp_bridge.check_address()
        except OSError as exc:
            raise self._tcp_error(exc, tls_loaded=False) from None

    async def start(self) -> None:
        """Check the TCP port, restore the policy, start the decode workers and the TCP bridge."""
        self.check_tcp_port()
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
                where = self.settings.tensorboard_dir
                raise StartupError(f"cannot write TensorBoard event files in {where}: {exc.strerror or exc}") from None
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
        try:
            await bridge.start()
        except OSError as exc:
            raise self._tcp_error(exc, tls_loaded=self.settings.tls_enabled) from None

    def _tcp_error(self, exc: OSError, tls_loaded: bool) -> StartupError:
        """What to tell a person whose TCP bridge could not listen (`tls_loaded`: the TLS
        files were being read too, so an error that is not the address's is theirs)."""
        settings = self.settings
        where = f"{settings.tcp_bind_host}:{settings.tcp_port}"
        if exc.errno == errno.EADDRINUSE:
            return PortsInUse(("TCP", where))
        if tls_loaded and not isinstance(exc, socket.gaierror) and exc.errno != errno.EADDRNOTAVAIL:
            return StartupError(
                f"cannot load the TLS certificate {settings.tls_certfile} and key {settings.tls_keyfile}: "
                f"{exc.strerror or exc}; check --tls-certfile and --tls-keyfile"
            )
        return StartupError(f"cannot listen for RLlink over TCP on {where}: {exc.strerror or exc}; check --tcp-host and --tcp-port")

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
