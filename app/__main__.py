"""`python -m app`: start the gateway (HTTP + WebSocket, and the TCP bridge) from settings.

Start-up problems a person can fix (a port in use, a checkpoint of other spaces, TLS
files that cannot be read) end the process with one line saying what to do, exit 2.
`--help` and bad settings answer before the gateway's modules (torch among them) are
imported: in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from pydantic import ValidationError

from app.settings.config import Settings
from app.settings.logs import configure_logging
from app.startup.cli import ConfigFileError, cli_prog_name, parse_command_line

log = logging.getLogger("app")

EXIT_STARTUP_ERROR = 2


def main() -> None:
    if sys.argv[1:2] == ["export"]:  # a run's model as a file, no server (app/startup/export.py)
        from app.startup import export

        sys.exit(export.main(sys.argv[2:], cli_prog_name()))
    try:
        settings = parse_command_line()
    except ConfigFileError as exc:
        print(f"cannot start: {exc}", file=sys.stderr)
        sys.exit(EXIT_STARTUP_ERROR)
    except ValidationError as exc:  # a bad flag or RLLINK_ variable: say which and why, no traceback
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())
        print(f"cannot start: invalid settings: {problems}", file=sys.stderr)
        sys.exit(EXIT_STARTUP_ERROR)
    configure_logging(settings.log_level)
    if settings.ray_address is not None:
        run_on_ray(settings)
        return
    from app.gateway import StartupError
    from app.startup.server import event_loop_factory, serve

    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve(settings))
    except StartupError as exc:
        log.error("cannot start: %s", exc)
        sys.exit(EXIT_STARTUP_ERROR)
    except KeyboardInterrupt:
        pass


def run_on_ray(settings: Settings) -> None:
    """The learner and --frontends front-ends as Ray actors (the optional extra `[ray]`)."""
    from app.gateway import StartupError

    try:
        from app.cluster import launch
    except ImportError:
        log.error("cannot start: --ray-address needs Ray: pip install 'rllink-gateway[ray]'")
        sys.exit(EXIT_STARTUP_ERROR)
    try:
        launch.run(settings)
    except StartupError as exc:  # also as raised in an actor (Ray's error is a subclass): its own words
        log.error("cannot start: %s", getattr(exc, "cause", exc))
        sys.exit(EXIT_STARTUP_ERROR)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
