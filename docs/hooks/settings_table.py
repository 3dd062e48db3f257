"""MkDocs hook: the settings tables of the docs, generated from the pydantic `Settings`.

A page writes a placeholder where a table goes, alone on its line:

    <!-- settings-table -->                    every field of Settings
    <!-- settings-table: ppo -->               the fields of a nested model, by its path:
    <!-- settings-table: policies.self_play -->  through dicts and optionals too

and the build puts a markdown table there (setting, type, default, description), made
from `Settings.model_fields` at build time, so the docs cannot drift from the code. A
field whose value is itself a model (`ppo`, `sac`) links its default to `#<path>`, the
heading of that model's own table on the same page. An unknown path fails the build.

`settings_table(path)` is what the tests call (tests/test_docs.py).
"""

from __future__ import annotations

import enum
import json
import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

PLACEHOLDER = re.compile(r"^<!--\s*settings-table(?::\s*(?P<path>[\w.]+))?\s*-->\s*$", re.MULTILINE)

REPO_ROOT = Path(__file__).resolve().parents[2]


def settings_model() -> type[BaseModel]:
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from app.settings.config import Settings  # noqa: PLC0415 - imported when a page needs it

    return Settings


# --- which model a path names ---------------------------------------------------------


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds: itself, or inside Optional, Union, Annotated, dict values, lists."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _models_in(args[0])
    if origin is dict:
        return _models_in(args[1])
    if origin in (typing.Union, types.UnionType, list, tuple):
        return [model for arg in args for model in _models_in(arg)]
    return []


def resolve(path: str | None) -> tuple[type[BaseModel], str]:
    """The model a dotted path names from Settings, and the prefix its fields are named with
    (`ppo.` for a nested setting; none where the path goes through a dict, as `policies.self_play`)."""
    model = settings_model()
    if not path:
        return model, ""
    prefix_holds = True
    for name in path.split("."):
        field = model.model_fields.get(name)
        if field is None:
            raise ValueError(f"settings-table: {model.__name__} has no field {name!r} (path {path!r})")
        models = _models_in(field.annotation)
        if len(models) != 1:
            raise ValueError(f"settings-table: {path!r}: field {name!r} is not one nested model")
        prefix_holds = prefix_holds and isinstance(field.annotation, type)
        model = models[0]
    return model, f"{path}." if prefix_holds else ""


# --- one cell at a time ---------------------------------------------------------------


def type_name(annotation: Any) -> str:
    """A short readable type: `int`, `str | None`, `"ppo" | "sac"`, `path`, `BoxSpace | DictSpace`."""
    if annotation is type(None):
        return "None"
    if annotation is Path:
        return "path"
    if annotation is SecretStr:
        return "secret str"
    if annotation is Any:
        return "any"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(json.dumps(arg) for arg in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return f"tuple[{type_name(args[0])}, ...]"
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(type_name(arg) for arg in args)}]"
    return getattr(annotation, "__name__", str(annotation))


def _json_value(value: Any) -> Any:
    """A default as it is written in JSON, YAML or a flag: spaces without their unset fields."""
    if isinstance(value, BaseModel):
        dumped = value.model_dump(mode="json")
        fields = type(value).model_fields
        return {
            key: item
            for key, item in dumped.items()
            if key == "type" or (item is not None and item != _json_value(fields[key].default))
        }
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return int(value)
    return value


def default_text(path_prefix: str, name: str, field: FieldInfo) -> str:
    factory = field.default_factory
    if factory is not None:
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            anchor = f"{path_prefix}{name}".replace(".", "-")
            return f"see [`{path_prefix}{name}.*`](#{anchor})"
        if factory in (list, dict, tuple, set):
            return f"`{json.dumps(_json_value(factory()))}`"
        doc = (factory.__doc__ or "").strip().splitlines()
        return _escape(doc[0].rstrip(".")) if doc else "computed at start-up"
    default = field.default
    if default is PydanticUndefined:
        return "required"
    if default is None:
        return "unset"
    value = _json_value(default)
    return f"`{value if isinstance(value, str) else json.dumps(value)}`"


# Words of a description that are names: flags, RLLINK_ variables, snake_case fields,
# MESSAGE_TYPES, file names and <placeholders>. They become code, so that markdown
# leaves their underscores and angle brackets alone.
_CODE_WORD = re.compile(
    r"""(?x)
    --[A-Za-z][\w.<>-]*[\w>]            # --flags, --ppo.<name-in-kebab-case>
    | '[^'\s]+'                          # 'onnx::Gemm_0', '<module_id>_opponent'
    | <[\w-]+>(?:[/\w.<>-]*[\w>/])?      # <runs-dir>/<run-id>/tensorboard
    | \bRLLINK_\w*                      # RLLINK_ variables
    | \b[A-Za-z][\w.]*_[\w.]*[A-Za-z0-9] # env_steps_per_sample, app_x.py, RLLINK_PPO__X
    """
)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def description_text(field: FieldInfo) -> str:
    text = " ".join((field.description or "").split())
    out, last = [], 0
    for match in _CODE_WORD.finditer(text):
        out.append(_escape(text[last : match.start()]))
        word = match.group(0).strip("'")
        out.append(f"`{word}`")
        last = match.end()
    out.append(_escape(text[last:]))
    return "".join(out)


def settings_table(path: str | None = None) -> str:
    """The markdown table of the model `path` names (None: Settings itself)."""
    model, prefix = resolve(path)
    first = "setting" if prefix or not path else "field"
    rows = [f"| {first} | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        # A pipe inside a code span does not split a cell (Python-Markdown's tables).
        rows.append(
            f"| `{prefix}{name}` | `{type_name(field.annotation)}` | {default_text(prefix, name, field)} "
            f"| {description_text(field)} |"
        )
    return "\n".join(rows) + "\n"


# --- the MkDocs hook ------------------------------------------------------------------


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if "settings-table" not in markdown:
        return markdown
    from mkdocs.exceptions import PluginError  # noqa: PLC0415 - the tests import this file without mkdocs

    try:
        return PLACEHOLDER.sub(lambda match: settings_table(match.group("path")), markdown)
    except (ValueError, ImportError) as error:
        raise PluginError(f"{page.file.src_path}: {error}") from error
