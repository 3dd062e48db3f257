"""The command line: pydantic-settings builds a flag per setting; the help is written here.

`parse_command_line(argv)` gives the Settings of a command line, with a one-line help per
flag that says what it does and its default in words (`on`, `none`, `CPU cores - 1`),
and a usage line naming the command actually run.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel
from pydantic_settings import BaseSettings, CliSettingsSource, YamlConfigSettingsSource

from app.settings.config import MiB, Settings
from app.training.algorithms import ALGORITHMS

# Defaults that read better in words than as a value.
_CLI_DEFAULTS = {
    "tcp_host": "same as --host",
    "decode_workers": "CPU cores - 1, at most 4",
    "max_frame_bytes": f"{8 * MiB} = 8 MiB",
    "auth_token": "off",
    "tls_certfile": "off",
    "tls_keyfile": "off",
    **{name: f"the --{name}.* defaults below" for name in ALGORITHMS},
    "ppo.target_kl": "off",
    "env_path": "none: no game is launched",
    "max_env_steps": "none: no limit",
    "max_seconds": "none: no limit",
}

# Flags of no settings field of their own: a nested model at once as JSON, and the fields of the spaces (app/spaces/models.py).
_FLAG_HELP = {
    "observation_space": "The whole observation space as one JSON object.",
    "action_space": 'The whole action space as one JSON object, e.g. {"type": "box", "shape": [1], "low": -2, "high": 2}.',
    **{name: f'Any {name.upper()} hyperparameters as one JSON object, e.g. {{"gamma": 0.98}}.' for name in ALGORITHMS},
    "observation_space.type": "Kind of observation space, box or dict; give it with the other --observation-space.* flags.",
    "observation_space.dtype": "Value type of a box: float32, or uint8 for an image [C, H, W] of 0..255.",
    "observation_space.spaces": 'Boxes of a dict observation by key, e.g. '
    '{"cam": {"type": "box", "shape": [3, 32, 32], "dtype": "uint8"}}.',
    "observation_space.shape": "Shape of one observation, e.g. [4].",
    "observation_space.low": "Lower bound of every observation value; none: unbounded.",
    "observation_space.high": "Upper bound of every observation value; none: unbounded.",
    "action_space.type": "Kind of action space, discrete, multi_discrete or box; give it with the other --action-space.* flags.",
    "action_space.n": "Number of actions of a discrete action space.",
    "action_space.dtype": "Value type of a box action space: float32.",
    "action_space.nvec": "Choices of each sub-action of a multi_discrete action space, e.g. [3, 2].",
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
    elif top in ALGORITHMS and sub in (model := ALGORITHMS[top].config).model_fields:
        description = model.model_fields[sub].description
        default = _field_default(model, sub)
    else:
        return None
    shown = _CLI_DEFAULTS.get(dest) or readable_default(default)
    return f"{description} (default: {shown})".replace("%", "%%")


_METAVARS = {"SecretStr": "str", "{int,dict[str,int]}": "int|JSON"}  # pydantic-settings' metavar -> the one shown


# The end of --help: one YAML file for a game (docs/training.md has it with every section explained).
GAME_EXAMPLE = """\
A complete config for a game build (python -m app --config train.yaml; flags override it):

  run_id: runner-01
  env_path: builds/Runner.x86_64        # launched num_envs times with the --rllink-* arguments
  num_envs: 8
  time_scale: 20
  headless: true
  max_env_steps: 2000000                # or per module: {runner: 2000000, chaser: 500000}
  max_seconds: 14400
  observation_space: {type: box, shape: [12]}
  action_space: {type: box, shape: [2], low: -1, high: 1}
  demos: runner_demos.jsonl             # recorded in the kits' heuristic mode
  bc_strength: 0.5                      # a BC loss during RL, falling to 0 over bc_steps
  env_params:
    goal_distance:
      curriculum:
        - {name: near, value: 2, completion_criteria: {threshold: 0.8, min_episodes: 50}}
        - {name: far, value: 30}
"""


def _add_argument(parser: Any, *names: str, **kwargs: Any) -> Any:
    """argparse's add_argument, with the help text of cli_help and readable metavars; the
    root parser (the one that gets --help) ends its help with GAME_EXAMPLE."""
    is_help = kwargs.get("action") == "help"
    if is_help:
        parser.epilog = GAME_EXAMPLE
    kwargs["help"] = "Show this help and exit." if is_help else cli_help(kwargs.get("dest", "")) or kwargs.get("help")
    if kwargs.get("metavar") in _METAVARS:
        kwargs["metavar"] = _METAVARS[kwargs["metavar"]]
    return parser.add_argument(*names, **kwargs)


def gateway_cli(settings_cls: type[BaseSettings] = Settings, **options: Any) -> CliSettingsSource[Any]:
    """The command-line source of the settings (`options` as CliSettingsSource's): flags of the fields, this help."""
    options.setdefault("cli_prog_name", cli_prog_name())
    return CliSettingsSource(settings_cls, add_argument_method=_add_argument, **options)


class ConfigFileError(ValueError):
    """The --config file cannot be read, is not YAML of settings, or names unknown ones."""


def config_file_path(argv: Sequence[str]) -> Path | None:
    """The --config flag's file, else RLLINK_CONFIG's; None without either."""
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2])
    value = os.environ.get("RLLINK_CONFIG")
    return Path(value) if value else None


def read_config_file(path: Path) -> dict[str, Any]:
    """The settings a YAML file sets, checked for names: a typo is an error, not a default."""
    try:
        values = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigFileError(f"--config {path}: {exc}") from None
    if not isinstance(values, dict):
        raise ConfigFileError(f"--config {path}: must be a mapping of setting names to values")
    unknown = [name for name in values if name not in Settings.model_fields or name == "config"]
    for group, spec in ALGORITHMS.items():
        if isinstance(values.get(group), dict):
            unknown += [f"{group}.{name}" for name in values[group] if name not in spec.config.model_fields]
    if unknown:
        raise ConfigFileError(f"--config {path}: unknown settings {', '.join(map(str, unknown))} (see --help)")
    return values


def _settings_class(config_file: Path | None) -> type[Settings]:
    """Settings, or Settings whose values come, below the environment and the flags, from the file."""
    if config_file is None:
        return Settings
    read_config_file(config_file)  # clear errors before pydantic's

    class SettingsWithFile(Settings):
        @classmethod
        def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings):
            file_settings = YamlConfigSettingsSource(settings_cls, yaml_file=config_file)
            return init_settings, env_settings, dotenv_settings, file_secret_settings, file_settings

    return SettingsWithFile


def with_game_args(argv: Sequence[str]) -> list[str]:
    """The flags, what follows a lone `--` (the launched games' own arguments) as `--env-args`."""
    argv = list(argv)
    if "--" not in argv:
        return argv
    split = argv.index("--")
    return [*argv[:split], "--env-args", json.dumps(argv[split + 1 :])]


def parse_command_line(argv: Sequence[str] | None = None, **options: Any) -> Settings:
    """Settings from these flags (default: the process's own; after a lone `--`, the launched
    games' own arguments), the environment and the --config file, in that order of
    precedence; --help exits."""
    argv = with_game_args(sys.argv[1:] if argv is None else argv)
    settings_cls = _settings_class(config_file_path(argv))
    source = gateway_cli(settings_cls, cli_parse_args=argv, **options)
    return settings_cls(_cli_settings_source=source)
