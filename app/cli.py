"""The command line: pydantic-settings builds a flag per setting; the help is written here.

`parse_command_line(argv)` gives the Settings of a command line, with a one-line help per
flag that says what it does and its default in words (`on`, `none`, `CPU cores - 1`),
and a usage line naming the command actually run.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_settings import BaseSettings, CliSettingsSource

from app.config import MiB, PPOConfig, Settings

# Defaults that read better in words than as a value.
_CLI_DEFAULTS = {
    "tcp_host": "same as --host",
    "decode_workers": "CPU cores - 1, at most 4",
    "max_frame_bytes": f"{8 * MiB} = 8 MiB",
    "auth_token": "off",
    "tls_certfile": "off",
    "tls_keyfile": "off",
    "ppo": "the --ppo.* defaults below",
    "ppo.target_kl": "off",
}

# Flags of no settings field of their own: a nested model at once as JSON, and the fields of the spaces (app/spaces.py).
_FLAG_HELP = {
    "observation_space": "The whole observation space as one JSON object.",
    "action_space": 'The whole action space as one JSON object, e.g. {"type": "box", "shape": [1], "low": -2, "high": 2}.',
    "ppo": 'Any PPO hyperparameters as one JSON object, e.g. {"gamma": 0.98}.',
    "observation_space.type": "Kind of observation space; always box.",
    "observation_space.shape": "Shape of one observation, e.g. [4].",
    "observation_space.low": "Lower bound of every observation value; none: unbounded.",
    "observation_space.high": "Upper bound of every observation value; none: unbounded.",
    "action_space.type": "Kind of action space, discrete or box; give it with the other --action-space.* flags.",
    "action_space.n": "Number of actions of a discrete action space.",
    "action_space.shape": "Shape of one action of a box action space, e.g. [1].",
    "action_space.low": "Lower bound of every box action value; none: unbounded.",
    "action_space.high": "Upper bound of every box action value; none: unbounded.",
}


def cli_prog_name(argv0: str | None = None) -> str:
    """The command the usage line shows: `rllink-gateway` when run as the console script, else `python -m app`."""
    return "rllink-gateway" if Path(argv0 if argv0 is not None else sys.argv[0]).stem == "rllink-gateway" else "python -m app"


def readable_default(value: Any) -> str:
    """A default as a person would type or read it: on/off, none, JSON for spaces and lists, 0.003 not 3e-3."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json", exclude_none=True))
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value)) if value else "none"
    return str(value)


def _field_default(model: type[BaseModel], name: str) -> Any:
    return model.model_fields[name].get_default(call_default_factory=True)


def cli_help(dest: str) -> str | None:
    """The one-line help of the flag that sets `dest` (`http_port`, `ppo.gamma`, ...): what it does, then its default."""
    top, _, sub = dest.partition(".")
    if top not in Settings.model_fields:
        return None
    if dest in _FLAG_HELP:
        description = _FLAG_HELP[dest]
        default = _field_default(Settings, top)
        if sub:
            default = getattr(default, sub, None)  # a box-only field while the default space is discrete
    elif not sub:
        description = Settings.model_fields[top].description
        default = _field_default(Settings, top)
    elif top == "ppo" and sub in PPOConfig.model_fields:
        description = PPOConfig.model_fields[sub].description
        default = _field_default(PPOConfig, sub)
    else:
        return None
    shown = _CLI_DEFAULTS.get(dest) or readable_default(default)
    return f"{description} (default: {shown})".replace("%", "%%")


def _add_argument(parser: Any, *names: str, **kwargs: Any) -> Any:
    """argparse's add_argument, with the help text of cli_help and readable metavars."""
    kwargs["help"] = "Show this help and exit." if kwargs.get("action") == "help" else cli_help(kwargs.get("dest", "")) or kwargs.get("help")
    if kwargs.get("metavar") == "SecretStr":
        kwargs["metavar"] = "str"
    return parser.add_argument(*names, **kwargs)


def gateway_cli(settings_cls: type[BaseSettings] = Settings, **options: Any) -> CliSettingsSource[Any]:
    """The command-line source of the settings (`options` as CliSettingsSource's): flags of the fields, this help."""
    options.setdefault("cli_prog_name", cli_prog_name())
    return CliSettingsSource(settings_cls, add_argument_method=_add_argument, **options)


def parse_command_line(argv: Sequence[str] | None = None, **options: Any) -> Settings:
    """Settings from the environment and these flags (default: the process's own); --help exits."""
    source = gateway_cli(Settings, cli_parse_args=list(sys.argv[1:] if argv is None else argv), **options)
    return Settings(_cli_settings_source=source)
