"""The docs (README.md and the MkDocs site in docs/) document what the code does."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

from app.settings.config import Settings
from app.training.algorithms import ALGORITHMS
from rllink.errors import ErrorCode

from .helpers import load_script

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
SITE_TEXT = "\n".join(page.read_text() for page in PAGES)


def load_settings_hook():
    """docs/hooks/settings_table.py, the MkDocs hook that writes the settings tables."""
    return load_script(DOCS / "hooks" / "settings_table.py", "settings_table_hook")


def test_every_setting_is_in_the_generated_table():
    hook = load_settings_hook()
    placeholders = hook.PLACEHOLDER.findall((DOCS / "configuration.md").read_text())
    assert "" in placeholders, "docs/configuration.md lost its <!-- settings-table --> placeholder"
    table = hook.settings_table()
    missing = [name for name in Settings.model_fields if f"| `{name}` |" not in table]
    assert not missing, f"settings missing from the generated table: {missing}"
    for nested in ALGORITHMS:  # each algorithm's section
        assert nested in placeholders, f"docs/configuration.md has no <!-- settings-table: {nested} -->"
        model = Settings.model_fields[nested].annotation
        table = hook.settings_table(nested)
        missing = [name for name in model.model_fields if f"| `{nested}.{name}` |" not in table]
        assert not missing, f"{nested} hyperparameters missing from the generated table: {missing}"


def test_every_error_code_is_in_the_docs():
    missing = [code.value for code in ErrorCode if f"`{code.value}`" not in SITE_TEXT]
    assert not missing, f"error codes missing from README.md and docs/: {missing}"


# A command that runs Python: `python ...`, `python3 ...` or `pytest ...` as the first word
# of a command (after any VAR=value), in a fenced block or an inline code span.
PYTHON_COMMAND = re.compile(r"^(?:\w+=\S*\s+)*(?P<word>python3?|pytest)\s+\S")
ACTIVATES_VENV = "source .venv/bin/activate"


def shell_commands(markdown: str):
    """(line number, command) of every line of a fenced code block and every inline code span."""
    in_fence = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            yield number, line.strip()
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span.strip()


def test_python_examples_use_the_project_venv():
    offenders = []
    for page in PAGES:
        text = page.read_text()
        if ACTIVATES_VENV in text:
            continue  # the page tells the reader to activate .venv first
        for number, line in shell_commands(text):
            for command in re.split(r"&&|\|\||;|\|", line):
                if PYTHON_COMMAND.match(command.strip()):
                    offenders.append(f"{page.relative_to(ROOT)}:{number}: {line}")
    assert not offenders, "use .venv/bin/python (or say to activate the venv):\n" + "\n".join(offenders)


def test_the_checker_sees_bare_python():
    commands = [c for _, c in shell_commands("run `python -m app`\n```bash\nRLLINK_X=1 python -m app\n```\n")]
    assert all(PYTHON_COMMAND.match(c) for c in commands) and len(commands) == 2
    assert not PYTHON_COMMAND.match(".venv/bin/python -m app")
    assert not PYTHON_COMMAND.match("python3")  # a name in prose, not a command


def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed in this environment")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=240, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    configuration = (tmp_path / "site" / "configuration" / "index.html").read_text()
    assert "settings-table" not in configuration, "a settings-table placeholder was left in the built page"
    assert "<code>max_frame_bytes</code>" in configuration
    assert (tmp_path / "site" / "dashboard.png").exists()


# Every file of the repository that the docs, the READMEs and the Python files' docstrings and
# comments name (`app/training/algorithms/ppo/loss.py`, `tests/helpers.py`, `static/`) exists, and so does every
# module named by its dotted name (`app.transport.tcp`, `rllink.action_dists`).
PROSE = [*PAGES, *sorted(ROOT.glob("clients/*/README.md"))]
PYTHON_FOLDERS = ("app", "bench", "clients/python", "docs", "scripts", "tests")
NOT_SOURCE = {"build", "__pycache__", ".venv", "node_modules"}
PYTHON_FILES = [*sorted(ROOT.glob("*.py")), *(
    path for folder in PYTHON_FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
    if not NOT_SOURCE.intersection(path.relative_to(ROOT).parts)
)]
# A Python file's docstrings (its triple-quoted strings) and comments.
PYTHON_PROSE = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|#[^\n]*')
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:app|bench|clients|docs|requirements|scripts|static|tests|rllink|rllink_clients)/[\w.*/~-]*[\w/*])"
)
MODULE_NAME = re.compile(r"(?<![\w./-])((?:app|rllink|rllink_clients)(?:\.[A-Za-z_]\w*)+)")
PYTHON_ROOT = ROOT / "clients" / "python"  # where rllink/ and rllink_clients/ are
# Paths a checkout does not hold, by design.
NOT_IN_A_CHECKOUT = {
    "app/http/web_files": "the wheel's copy of static/ and the vendor files, made when the wheel is built (pyproject.toml)",
    "clients/csharp/build/": "what clients/csharp/build.sh writes",
}
# Dotted names that start like a module's and are none.
NOT_MODULES = {
    "app.state": "FastAPI's `app.state`, the application object's, not the package's",
    "rllink.js": "static/rllink.js, a file's name",
}


def named_in(text: str, pattern: re.Pattern, python: bool):
    """(offset, name) of each match of pattern in a page, or in a Python file's docstrings and comments."""
    parts = [(part.start(), part.group()) for part in PYTHON_PROSE.finditer(text)] if python else [(0, text)]
    for start, part in parts:
        for match in pattern.finditer(part):
            yield start + match.start(1), match.group(1)


def path_missing(path: str) -> bool:
    if any(path.startswith(prefix) for prefix in NOT_IN_A_CHECKOUT):
        return False
    base = ROOT
    if path.split("/")[0] in ("rllink", "rllink_clients"):
        if "." not in path.rsplit("/", 1)[-1] and not path.endswith("/"):
            return False  # rllink/PixelGrid-v0, rllink/obs: a gymnasium id or an ONNX tensor name, no file
        base = PYTHON_ROOT
    if "*" in path:
        return next(base.glob(path), None) is None
    return not (base / path).exists()


@cache
def source_of(module: Path) -> str:
    return module.read_text()


def module_missing(name: str) -> bool:
    """Whether `name` is neither a module nor a name a module defines or imports (app.sansio.protocol.Session)."""
    if any(name == other or name.startswith(other + ".") for other in NOT_MODULES):
        return False
    first, *rest = name.split(".")
    path = (ROOT if first == "app" else PYTHON_ROOT) / first
    for part in rest:
        if (path / part / "__init__.py").exists() or any((path / (part + suffix)).exists() for suffix in (".py", ".pyi")):
            path = path / part
            continue
        if re.fullmatch(r"__\w+__", part):
            return False  # what every module has: app.__file__
        module = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        defined = rf"^(?:\s*(?:async\s+def|def|class)\s+{part}\b|{part}\s*[:=]|(?:from|import)\s.*\b{part}\b)"
        return re.search(defined, source_of(module), re.MULTILINE) is None
    return False


def missing_names(files) -> list[str]:
    missing = []
    for file in files:
        text = file.read_text()
        python = file.suffix == ".py"
        named = [(offset, name, path_missing) for offset, name in named_in(text, REPO_PATH, python)]
        named += [(offset, name, module_missing) for offset, name in named_in(text, MODULE_NAME, python)]
        for offset, name, is_missing in sorted(named):
            if is_missing(name):
                missing.append(f"{os.path.relpath(file, ROOT)}:{text.count(chr(10), 0, offset) + 1}: {name}")
    return missing


def test_every_file_and_module_named_exists():
    missing = missing_names(PROSE + PYTHON_FILES)
    assert not missing, "named in the docs or a docstring or comment, and not in the repository:\n" + "\n".join(missing)


def test_the_name_checker_sees_stale_names(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "`app/web.py`, app/http/web.py, tests/test_browser_*.py, tests/test_none_*.py, `app.tcp_bridge`,\n"
        "app.transport.tcp, app.sansio.protocol.Session, app.sansio.protocol.NoSuchThing, app.state.gateway, app.__file__,\n"
        "rllink/PixelGrid-v0, rllink/action_dists.py, rllink/no_such.py, clients/csharp/build/RLlink.dll\n"
    )
    source = tmp_path / "module.py"
    docstring, comment = '"' * 3 + "See app/spaces.py." + '"' * 3, chr(35) + " and app.trajectory"  # not this file's own
    source.write_text(f'{docstring}\nx = "app/in_code.py"  {comment}\n')
    missing = missing_names([page, source])
    assert [line.split(":", 1)[1] for line in missing] == [
        "1: app/web.py", "1: tests/test_none_*.py", "1: app.tcp_bridge", "2: app.sansio.protocol.NoSuchThing",
        "3: rllink/no_such.py", "1: app/spaces.py", "2: app.trajectory",
    ]


def test_the_layer_diagram_is_the_import_contract():
    """docs/architecture.md draws the layers of pyproject.toml's import-linter contracts, in their order."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = [contract["layers"] for contract in contracts if contract["type"] == "layers"]
    app_layers = next(layers for layers in layered if all(layer.startswith("app.") for layer in layers))
    diagram = re.search(r"```text\n(.*?)```", (DOCS / "architecture.md").read_text(), re.DOTALL).group(1)
    drawn = [" | ".join(re.findall(r"app\.\w+", line)) for line in diagram.splitlines() if re.match(r"\s*[│▼]\s+app\.", line)]
    assert drawn == [" | ".join(name.strip() for name in layer.split("|")) for layer in app_layers], (
        "docs/architecture.md's diagram and pyproject.toml's layers differ"
    )
    beside = {name.strip() for layers in layered for layer in layers for name in layer.split("|")}
    beside -= {"app", *(name for line in drawn for name in line.split(" | "))}
    missing = sorted(name for name in beside if not re.search(rf"^\s+{re.escape(name)}\s", diagram, re.MULTILINE))
    assert not missing, f"layers of pyproject.toml's contracts missing from docs/architecture.md's diagram: {missing}"


# A table cell holds a paragraph at most; on the benchmarks page a sentence or two: the latest
# figure and the target, every earlier run in bench/RESULTS.md.
MAX_CELL_CHARS = 1300
MAX_RESULT_CELL_CHARS = 400


def table_rows(markdown: str):
    """(line number, cells) of every row of every table, outside code blocks; no separator rows."""
    in_fence = False
    for number, line in enumerate(markdown.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.lstrip().startswith("|") and not re.fullmatch(r"[\s|:-]+", line):
            unpiped = re.sub(r"`[^`]*`", lambda span: span.group().replace("|", "/"), line.strip())
            yield number, [cell.strip() for cell in re.split(r"(?<!\\)\|", unpiped.strip("|"))]


def test_table_cells_are_short():
    offenders = []
    for page in sorted(DOCS.rglob("*.md")):
        bound = MAX_RESULT_CELL_CHARS if page.name == "benchmarks.md" else MAX_CELL_CHARS
        for number, cells in table_rows(page.read_text()):
            offenders += [f"{page.relative_to(ROOT)}:{number}: {len(cell):,} > {bound} characters: {cell[:60]}..."
                          for cell in cells if len(cell) > bound]
    assert not offenders, "table cells too long (history goes to bench/RESULTS.md):\n" + "\n".join(offenders)


def test_the_benchmarks_page_has_one_row_per_script():
    scripts = sorted(path.name for path in (ROOT / "bench").glob("*.py") if not path.name.startswith("_"))
    rows = [(re.search(r"bench/(\w+\.py)", cells[0]), cells) for _, cells in table_rows((DOCS / "benchmarks.md").read_text())]
    rows = rows[1:]  # the header
    named = sorted(row.group(1) if row else f"(no script: {cells[0]})" for row, cells in rows)
    assert named == scripts, "docs/benchmarks.md's table: one row per script of bench/"
