"""The Godot 4 kit (clients/godot4/, GDScript 2.0).

No Godot 4 runtime exists on this machine or in CI (Debian 12 ships Godot 3 only), so
what runs everywhere is static:

- every `.gd` file parses with gdtoolkit 4's `gdparse` and passes `gdlint` (the kit's
  `gdlintrc`), and the check does catch a broken script, naming the file and the error;
- every `res://` path a script preloads or extends exists in the kit;
- every RLlink message type the kit sends is a request the gateway knows (all of them),
  every reply it waits for is one the gateway sends, and the gateway error codes the
  kit reacts to are the gateway's;
- the launch arguments the kit reads are RLLINK.md's "Launching games" names;
- every setting the README documents is an `@export` of the agent node, and back;
- demonstrations: the recorder (rllink_demo_recorder.gd) writes exactly the chunk fields
  the Python recorder writes, each a field of the gateway's EpisodeChunk and every
  required one among them, under the same header; the heuristic session feeds it every
  step, reward and episode end, and the agent makes it from `record_demos_path`;
- the masked-pick example (ported from the Godot 3 kit) is the Python reference env's
  MaskedPick (its constants), and its scene, script and command line agree;
- evaluation episodes: every SET_CONFIG field the kit reads (`evaluation_interval` among
  them) is the gateway's SetConfig's, the local session's chunks carry only EpisodeChunk
  fields (`evaluation` among them), the thin session reads EpisodeStarted's `evaluation`;
  the local session's turn is the Python reference client's `is_evaluation_episode` (its
  expression evaluated here), played with the mode; heuristic and model_file play never
  evaluate; the agent's read-only `is_evaluation_episode` is documented;
- memory (RLLINK.md "Recurrent policies"): the names the kit uses (`state_size`,
  `state_in`, `state_out`) are the gateway's SetConfig / PolicyDescription / EpisodeChunk
  fields and ONNX tensor names, the GDScript runtime supports every operator, tensor type
  and Slice form of the gateway's recurrent export, and the local and model_file sessions
  carry each agent's state (zeros at an episode's start, state_out fed back, kept across
  model versions, every local chunk's `state_in`).
- exploration noise (SET_CONFIG's `action_noise` "pink", the docs' "Exploration noise"):
  the kit reads the gateway's field, its pink noise has the Python reference's time
  constants and update (the same as the Godot 3 kit's, which tests/test_godot_kit.py runs),
  each episode's is drawn anew and advanced before every action into the sampler, and the
  README says it was never run in Godot 4.

With a Godot 4 binary (`godot4` on PATH, or `GODOT4` naming it) the example trains
CartPole headless against a real gateway in thin mode, masked-pick with action masks, the
GDScript ONNX runtime is compared with onnxruntime, and heuristic masked-pick play is
recorded with no gateway and loaded by the gateway's loader, local-mode CartPole plays
every 5th episode as an evaluation one, which the gateway counts apart, and a recurrent
model stepped through an episode in the GDScript runtime matches onnxruntime stepped the
same way (outputs and state_out); without one these are skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.schemas import (
    NO_REPLY_TYPES,
    REQUEST_TYPES,
    RESPONSE_TYPES,
    EpisodeChunk,
    EpisodeStarted,
    GetConfig,
    PolicyDescription,
    SetConfig,
)
from app.spaces.onnx_names import STATE_INPUT, STATE_OUTPUT
from rllink.errors import ErrorCode
from rllink_clients import demos as python_demos
from rllink_clients.choice_envs import MaskedPickEnv
from rllink_clients.gym_client import is_evaluation_episode

from .helpers import RunningGateway, gateway_settings, running_gateway, wait_until

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "clients" / "godot4"
ADDON = KIT / "addons" / "rllink"
EXAMPLE = KIT / "example"
BIN = Path(sys.executable).parent
GDPARSE, GDLINT = BIN / "gdparse", BIN / "gdlint"
GODOT4 = os.environ.get("GODOT4") or shutil.which("godot4")


def gd_files(root: Path) -> list[Path]:
    """Every .gd file under root once (the example's addons/rllink is a link to the addon)."""
    seen: dict[Path, Path] = {}
    for path in sorted(root.rglob("*.gd")):
        seen.setdefault(path.resolve(), path)
    return sorted(seen.values())


def gdscript_problems(root: Path) -> list[str]:
    """What gdparse and gdlint (run from root, so its gdlintrc applies) say about the .gd
    files under root: one entry per failing file and tool, naming both; empty when all
    pass. One run of each tool over every file; each file its output names (both tools
    start a problem's lines with the file's path) runs again alone, for its own message."""
    names = [str(path.relative_to(root)) for path in gd_files(root)]
    problems = []
    for tool in (GDPARSE, GDLINT):
        together = _run(tool, root, names)
        if together.returncode == 0:
            continue
        output = together.stdout + together.stderr
        failing = [name for name in names if re.search(rf"^{re.escape(name)}:", output, flags=re.M)]
        assert failing, f"{tool.name} failed without naming a file:\n{output}"
        for name in failing:
            alone = _run(tool, root, [name])
            problems.append(f"{tool.name} {name}:\n{alone.stdout}{alone.stderr}".strip())
    return problems


def _run(tool: Path, root: Path, names: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool), *names], cwd=root, capture_output=True, text=True, timeout=300)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def kit_sources() -> str:
    return "\n".join(read(path) for path in gd_files(KIT))


# -- GDScript 2.0: parses and lints ---------------------------------------------------------


def test_every_gdscript_file_of_the_kit_parses_and_lints():
    files = gd_files(KIT)
    assert len(files) >= 25, files  # the addon, the example and its tool
    problems = gdscript_problems(KIT)
    assert not problems, "\n\n".join(problems)


def test_the_check_names_a_broken_script_and_its_error(tmp_path):
    """The check above is not vacuous: a copy of the kit with one script that does not
    parse and one that breaks a lint rule fails, naming both files and what is wrong."""
    copy = tmp_path / "godot4"
    shutil.copytree(KIT, copy, symlinks=True)
    agent = copy / "addons" / "rllink" / "rllink_agent.gd"
    agent.write_text(read(agent).replace("func stop() -> void:", "func stop( -> void:"), encoding="utf-8")
    env = copy / "example" / "cartpole_env.gd"
    env.write_text(read(env).replace("func observation()", "func Observation()"), encoding="utf-8")
    problems = gdscript_problems(copy)
    named = {tuple(problem.split(":", 1)[0].split()) for problem in problems}
    assert ("gdparse", "addons/rllink/rllink_agent.gd") in named
    assert ("gdlint", "example/cartpole_env.gd") in named
    assert {name for _, name in named} == {"addons/rllink/rllink_agent.gd", "example/cartpole_env.gd"}, problems
    parse = next(p for p in problems if p.startswith("gdparse addons/rllink/rllink_agent.gd"))
    assert "Unexpected token" in parse
    lint = next(p for p in problems if p.startswith("gdlint example/cartpole_env.gd"))
    assert 'Function name "Observation" is not valid' in lint


# -- Static checks of what the scripts name -------------------------------------------------------


def test_every_res_path_a_script_loads_exists():
    """preload("res://...") and extends "res://..." resolve inside the example project,
    whose addons/rllink is the kit's addon."""
    paths = set()
    for path in gd_files(KIT):
        paths |= set(re.findall(r'(?:preload\(|extends )"(res://[^"]+)"', read(path)))
    assert "res://addons/rllink/rllink_agent.gd" in paths and "res://cartpole_env.gd" in paths
    missing = [p for p in sorted(paths) if not (EXAMPLE / p.removeprefix("res://")).is_file()]
    assert not missing, missing
    assert (EXAMPLE / "addons" / "rllink").resolve() == ADDON.resolve()
    project = read(EXAMPLE / "project.godot")
    assert "config_version=5" in project and 'run/main_scene="res://main.tscn"' in project
    assert 'path="res://main.gd"' in read(EXAMPLE / "main.tscn")


def test_the_kit_speaks_every_request_the_gateway_knows_and_only_those():
    sources = kit_sources()
    sent = set(re.findall(r'"type": "([A-Z_]+)"', sources))
    client = read(ADDON / "rllink_client.gd")
    replies = dict(re.findall(r'^\t"([A-Z_]+)": "([A-Z_]+)",$', client, flags=re.M))
    assert sent == REQUEST_TYPES, sorted(sent ^ REQUEST_TYPES)
    assert set(replies.values()) | {"ERROR"} == RESPONSE_TYPES
    assert set(REQUEST_TYPES) - set(replies) == NO_REPLY_TYPES  # no reply is waited for in vain
    # The spaces the game declares travel in GET_CONFIG fields the gateway reads.
    for field in ("observation_space", "action_space", "policies"):
        assert f'"{field}"' in client and field in GetConfig.model_fields


def test_the_gateway_error_codes_the_kit_reacts_to_are_the_gateways():
    own = set(re.findall(r'^const [A-Z_]+ = "([a-z_]+)"', read(ADDON / "rllink_client.gd"), flags=re.M))
    assert own == {"connection_closed", "timeout", "bad_frame", "unexpected_reply", "tls_error"}
    gateway = {code.value for code in ErrorCode}
    quoted = set(re.findall(r'"([a-z]+(?:_[a-z]+)+)"', kit_sources()))
    named = {code for code in quoted if code.startswith(("too_many", "unknown_", "invalid_", "idle_", "frame_"))}
    assert {"unknown_episode", "too_many_connections", "idle_timeout", "invalid_message"} <= named
    assert named <= gateway, sorted(named - gateway)
    assert not own & gateway  # the kit's own codes never pass for the gateway's


def test_the_launch_arguments_are_rllinks_names():
    """The kit reads RLLINK.md's "Launching games" arguments: exactly the ones the
    gateway's launcher gives a game (when this tree has it)."""
    kit = set(re.findall(r'"(--rllink-[a-z-]+)"', read(ADDON / "rllink_launch_args.gd")))
    names = {"--rllink-host", "--rllink-port", "--rllink-token", "--rllink-time-scale", "--rllink-env-index"}
    assert kit == names
    if importlib.util.find_spec("app.startup.launcher") is not None:
        from app.startup.launcher import game_arguments

        given = game_arguments("127.0.0.1", 5555, 3, 20.0, token="t")
        assert {word for word in given if word.startswith("--")} == kit


def exported_settings() -> set[str]:
    return set(re.findall(r"^@export\w*(?:\([^)]*\))? var (\w+)", read(ADDON / "rllink_agent.gd"), flags=re.M))


def test_every_setting_the_readme_documents_is_an_export_of_the_agent_and_back():
    readme = read(KIT / "README.md")
    section = readme[readme.index("## Settings") :]
    section = section[: section.index("\n## ", 1)]
    documented = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))
    exported = exported_settings()
    assert {"host", "port", "token", "transport", "inference", "time_scale", "model_path"} <= exported
    assert documented == exported, f"README only: {sorted(documented - exported)}; agent only: {sorted(exported - documented)}"
    inference = re.search(r"@export_enum\(([^)]*)\) var inference", read(ADDON / "rllink_agent.gd"))
    assert inference and re.findall(r'"(\w+)"', inference.group(1)) == ["thin", "local", "model_file", "heuristic"]


# -- Demonstrations and the masked-pick example ------------------------------------------------


def test_the_demo_recorder_writes_the_chunk_fields_the_gateways_loader_reads():
    recorder = read(ADDON / "rllink_demo_recorder.gd")
    written = set(re.findall(r'chunk\["(\w+)"\] =', recorder))
    required = {name for name, field in EpisodeChunk.model_fields.items() if field.is_required()}
    assert written == set(python_demos.DEMO_FIELDS), sorted(written ^ set(python_demos.DEMO_FIELDS))
    assert required <= written <= set(EpisodeChunk.model_fields), sorted(written - set(EpisodeChunk.model_fields))
    header = re.search(r'const HEADER = \(\s*"([^"]*)"\s*\+\s*"([^"]*)"\s*\)', recorder)
    assert header and header.group(1) + header.group(2) == python_demos.HEADER
    assert "JsonWriter.write(chunk)" in recorder and "_file.flush()" in recorder  # the wire's numbers, a line per episode
    # The heuristic session feeds it every step, reward and episode end; the agent makes it.
    session = read(ADDON / "rllink_heuristic_session.gd")
    for call in (
        "recorder.step(obs, _action, mask)",
        "recorder.add_reward(reward)",
        "recorder.end_episode(final_obs, terminated, truncated)",
    ):
        assert call in session, call
    agent = read(ADDON / "rllink_agent.gd")
    assert "record_demos_path" in exported_settings()
    assert "DemoRecorder.new(record_demos_path)" in agent and "session.recorder = _recorder" in agent


def test_the_masked_pick_example_is_the_reference_env_with_its_scene_and_command_line():
    env = read(EXAMPLE / "masked_pick_env.gd")
    constants = {name: int(value) for name, value in re.findall(r"^const (\w+) = (\d+)$", env, flags=re.M)}
    assert constants == {"ITEMS": MaskedPickEnv.ITEMS, "FORBIDDEN": MaskedPickEnv.FORBIDDEN, "LENGTH": MaskedPickEnv.LENGTH}
    agent = read(EXAMPLE / "masked_pick_agent.gd")
    assert "func get_action_mask() -> Array:" in agent and "func get_heuristic_action():" in agent
    scene = read(EXAMPLE / "masked_pick.tscn")
    assert scene.startswith("[gd_scene") and "format=3" in scene and 'path="res://main.gd"' in scene
    main = read(EXAMPLE / "main.gd")
    scene_env = re.search(r'^env = "([\w-]+)"$', scene, flags=re.M)
    choices = re.search(r"@export_enum\(([^)]*)\) var env", main)
    assert scene_env and choices
    envs = re.findall(r'"([\w-]+)"', choices.group(1))
    assert scene_env.group(1) == "masked-pick" and envs == ["cartpole", "masked-pick"]
    cli = read(EXAMPLE / "cli.gd")
    assert re.findall(r'"([\w-]+)"', re.search(r"^const ENVS = \[(.*)\]$", cli, flags=re.M).group(1)) == envs
    for flag in ("--env", "--record-demos", "--episodes"):
        assert f'"{flag}"' in cli, flag


# -- Evaluation episodes (RLLINK.md "Evaluation episodes") ------------------------------------


def gd_function(source: str, name: str) -> str:
    """The body of a GDScript function: from its `func` line to the next top-level line."""
    found = re.search(rf"^(?:static )?func {name}\(.*?(?=^\S)", source + "\n#", flags=re.M | re.S)
    assert found, name
    return found.group(0)


def test_every_set_config_field_the_kit_reads_is_the_gateways():
    read_fields = set(re.findall(r'\bconfig\.get\("(\w+)"', kit_sources()))
    assert {"evaluation_interval", "env_steps_per_sample", "policies", "policy_mapping"} <= read_fields
    assert read_fields <= set(SetConfig.model_fields), sorted(read_fields - set(SetConfig.model_fields))
    local = read(ADDON / "rllink_local_session.gd")
    assert 'int(client.config.get("evaluation_interval", 0))' in local  # absent (an older gateway): none


def test_the_local_sessions_chunks_carry_episode_chunk_fields_and_evaluation_on_every_chunk():
    local = read(ADDON / "rllink_local_session.gd")
    new_chunk = gd_function(local, "_new_chunk")
    literal = re.search(r"var chunk := \{(.*?)\n\t\}", new_chunk, flags=re.S)
    assert literal
    fields = set(re.findall(r'"(\w+)":', literal.group(1))) | set(re.findall(r'chunk\["(\w+)"\] =', local))
    assert {"obs", "actions", "rewards", "action_logp", "episode_id", "evaluation", "action_mask"} <= fields
    assert fields <= set(EpisodeChunk.model_fields), sorted(fields - set(EpisodeChunk.model_fields))
    assert re.search(r'^\tif evaluating:\n\t\tchunk\["evaluation"\] = true\b', new_chunk, flags=re.M)
    # Every chunk comes from _new_chunk: the episode's first and each continuation after a sample.
    assert local.count("_chunk = _new_chunk(_obs)") == 2 and local.count('"obs": [') == 1


def test_the_local_session_plays_the_python_clients_evaluation_turn_with_the_mode():
    local = read(ADDON / "rllink_local_session.gd")
    turn = gd_function(local, "is_evaluation_episode")
    assert turn.startswith("static func is_evaluation_episode(played: int, interval: int) -> bool:")
    expression = re.search(r"^\treturn (.+)$", turn, flags=re.M)
    assert expression and re.fullmatch(r"[\w\s%=<>+-]+", expression.group(1)), turn  # the same in Python
    for interval in range(6):
        for played in range(13):
            gdscript = eval(expression.group(1), {"__builtins__": {}}, {"played": played, "interval": interval})  # noqa: S307
            assert gdscript == is_evaluation_episode(played, interval), (played, interval)
    act = gd_function(local, "_act")
    decided = act.index("if _chunk == null:  # a new episode")
    assert decided < act.index("runner.act(") and "runner.act(_obs, _mask, explore and not evaluating, _state, draws)" in act
    assert "training_enabled and is_evaluation_episode(_episodes_played, interval)" in act
    assert "_episodes_played += 1" in gd_function(local, "end_episode")


def test_the_thin_session_reads_episode_starteds_evaluation():
    assert "evaluation" in EpisodeStarted.model_fields
    thin = gd_function(read(ADDON / "rllink_thin_session.gd"), "poll_step")
    assert 'var marked = _start.reply.get("evaluation", false)' in thin
    assert "evaluating = typeof(marked) == TYPE_BOOL and marked" in thin
    assert '"evaluation"' not in read(ADDON / "rllink_client.gd")  # a thin client sends nothing different


def test_the_agents_is_evaluation_episode_is_read_only_documented_and_never_true_for_own_play():
    session = read(ADDON / "rllink_session.gd")
    assert re.search(r"^var evaluating := false$", session, flags=re.M)
    for own_play in ("rllink_heuristic_session.gd", "rllink_model_file_session.gd", "rllink_demo_recorder.gd"):
        assert "evaluat" not in read(ADDON / own_play), own_play
    agent = read(ADDON / "rllink_agent.gd")
    prop = re.search(r"^var is_evaluation_episode: bool:\n((?:\t.*\n)+)", agent, flags=re.M)
    assert prop, "the agent's is_evaluation_episode property"
    assert "return session != null and session.evaluating" in prop.group(1)
    assert re.search(r"\tset\(_value\):\n\t\tpush_error\(.*read-only", prop.group(1))  # nothing is assigned
    assert "is_evaluation_episode" not in exported_settings()
    readme = read(KIT / "README.md")
    assert "**Evaluation episodes**" in readme and "`is_evaluation_episode`" in readme and "`evaluation: true`" in readme
    main = read(EXAMPLE / "main.gd")
    assert "if agent.is_evaluation_episode:" in main and '", %d evaluation episodes" % evaluations' in main


# -- Memory (RLLINK.md "Recurrent policies") ---------------------------------------------------


def gd_list(source: str, name: str) -> list[str]:
    """The strings of a GDScript `const NAME = [...]`."""
    found = re.search(rf"^const {name} = \[(.*?)\]", source, flags=re.M | re.S)
    assert found, name
    return re.findall(r'"(\w+)"', found.group(1))


def recurrent_model(action_masking: bool = False, normalize_obs: bool = True, cell: int = 5, seed: int = 0) -> bytes:
    """The gateway's ONNX export of a PPO policy with an LSTM (random weights, so that
    every gate matters), as SET_STATE and model.onnx carry it."""
    import torch

    from app.spaces.models import BoxSpace, DiscreteSpace
    from app.training.algorithms.ppo.onnx_head import export_onnx
    from app.training.policy import ActorCritic

    torch.manual_seed(seed)
    policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=3), (16,), normalize_obs=normalize_obs, lstm_cell_size=cell)
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.uniform_(-0.5, 0.5)
    return export_onnx(policy, 7, action_masking=action_masking)


def test_the_kits_recurrent_names_are_the_gateways():
    mlp = read(ADDON / "rllink_mlp_policy.gd")
    consts = dict(re.findall(r'^const (STATE_\w+) = "(\w+)"$', mlp, flags=re.M))
    assert consts == {"STATE_INPUT": STATE_INPUT, "STATE_OUTPUT": STATE_OUTPUT}
    # state_size: SET_CONFIG's (the default module's, top level) and each policies entry's.
    assert "state_size" in SetConfig.model_fields and "state_size" in PolicyDescription.model_fields
    fallback = re.search(r"for key in \[(.*?)\]:", gd_function(read(ADDON / "rllink_client.gd"), "module_for"), flags=re.S)
    assert fallback and "state_size" in re.findall(r'"(\w+)"', fallback.group(1))
    runner = read(ADDON / "rllink_policy_runner.gd")
    assert 'module_info.get("state_size")' in runner  # checked against the model's state_in
    assert set(re.findall(r'module_info\.get\("(\w+)"', runner)) <= set(PolicyDescription.model_fields) | {"module_id"}
    # state_in on every local chunk, an EpisodeChunk field.
    assert "state_in" in EpisodeChunk.model_fields
    new_chunk = gd_function(read(ADDON / "rllink_local_session.gd"), "_new_chunk")
    assert re.search(r'^\tif runner\.state_size > 0:.*\n\t\tchunk\["state_in"\] = _state\.duplicate\(\)$', new_chunk, flags=re.M)


@pytest.mark.parametrize("action_masking", [False, True], ids=["plain", "masked"])
def test_the_gdscript_runtime_supports_everything_the_gateways_recurrent_export_uses(action_masking):
    """Every operator of the export is in the runtime's SUPPORTED and none is an image
    op; every initializer is float32 or int64 (the two _read_tensor reads); every Slice
    has the form _check_slices accepts (starts, ends, axes as int64 initializers, no
    steps); the inputs and outputs are the ones the runtime feeds and reads."""
    import onnx

    mlp = read(ADDON / "rllink_mlp_policy.gd")
    supported, image_ops = set(gd_list(mlp, "SUPPORTED")), set(gd_list(mlp, "IMAGE_OPS"))
    model = onnx.load_from_string(recurrent_model(action_masking))
    ops = {node.op_type for node in model.graph.node}
    assert {"Slice", "Gemm", "Add", "Sigmoid", "Tanh", "Mul", "Concat"} <= ops  # the LSTM step, written out
    assert ops <= supported, sorted(ops - supported)
    assert not ops & image_ops and "Slice" not in image_ops
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [13]
    initializers = {t.name: t for t in model.graph.initializer}
    assert {t.data_type for t in initializers.values()} == {onnx.TensorProto.FLOAT, onnx.TensorProto.INT64}
    assert re.search(r"^const FLOAT32 = 1\b", mlp, flags=re.M) and re.search(r"^const INT64 = 7$", mlp, flags=re.M)
    for node in model.graph.node:
        if node.op_type == "Slice":
            assert 3 <= len(node.input) <= 4, node  # data, starts, ends, axes: no steps
            for name in node.input[1:]:
                assert initializers[name].data_type == onnx.TensorProto.INT64, name
            assert onnx.numpy_helper.to_array(initializers[node.input[3]]).tolist() in ([1], [-1])  # 2-D, on axis 1
            assert not node.attribute  # opset 10+: no starts/ends attributes
    inputs = [i.name for i in model.graph.input]
    assert inputs == ["obs", "action_mask", STATE_INPUT] if action_masking else ["obs", STATE_INPUT]
    assert [o.name for o in model.graph.output] == ["action_dist_inputs", STATE_OUTPUT]
    dims = [d.dim_value for d in model.graph.input[-1].type.tensor_type.shape.dim]
    meta = {p.key: p.value for p in model.metadata_props}
    assert dims[1] == int(meta["state_size"]) == 10  # a fixed state_size, as _read_state_size wants
    # The mask is found among the inputs that are neither the observation nor the state.
    assert "\t\t\tif name != input_name and name != STATE_INPUT:\n\t\t\t\tmask_input_name = name" in mlp


def test_the_local_and_model_file_sessions_carry_each_agents_state():
    local = read(ADDON / "rllink_local_session.gd")
    act = gd_function(local, "_act")
    new_episode = act.index("if _chunk == null:  # a new episode")
    zeros = act.index("_state = runner.zero_state()  # a new episode starts with no memory")
    fed = act.index("runner.act(_obs, _mask, explore and not evaluating, _state, draws)")
    chunk = act.index("_chunk = _new_chunk(_obs)")
    back = act.index("_state = decided.state")
    assert new_episode < zeros < fed < chunk < back  # the chunk's state_in is the state fed with its first obs
    # A chunk after a sample goes on from the last state_out (the state fed with _obs): untouched there.
    begin_step = gd_function(local, "begin_step")
    assert "_chunk = _new_chunk(_obs)" in begin_step and not re.search(r"(?<!\w)_state\b", begin_step)
    assert "_state = []" in gd_function(local, "end_episode")
    for kept in ("_load", "_state_arrived"):  # a new model version keeps the state
        assert not re.search(r"(?<!\w)_state\b", gd_function(local, kept)), kept
    model_file = read(ADDON / "rllink_model_file_session.gd")
    poll = gd_function(model_file, "poll_step")
    assert poll.index("_state = runner.zero_state()") < poll.index("runner.act(_obs, _mask, explore, _state)")
    assert poll.index("runner.act(_obs, _mask, explore, _state)") < poll.index("_state = decided.state")
    assert "_state = []" in gd_function(model_file, "end_episode")
    runner = read(ADDON / "rllink_policy_runner.gd")
    act = gd_function(runner, "act")
    assert act.startswith("func act(obs, mask: Array, explore: bool, state := [], noise := []) -> Dictionary:")
    assert "policy.step(obs, state, mask, not explore)" in act and '"state": stepped.state' in act


def test_the_readme_says_memory_was_never_run_in_godot4():
    readme = read(KIT / "README.md")
    assert "**Memory**" in readme
    memory = readme[readme.index("\n**Memory** (") :].split("\n\n")[0]
    for name in ("state_size", "state_in", "state_out"):
        assert f"`{name}`" in memory, name
    assert "**local**" in memory and "**model_file**" in memory and "**thin**" in memory
    assert "never run in a Godot 4" in memory


# -- Exploration noise (SET_CONFIG's action_noise) ----------------------------------------------


def test_the_kits_pink_noise_is_the_reference_process_read_from_the_gateways_field():
    """rllink_pink_noise.gd (both kits): the Python reference's time constants, each process
    drawn N(0, 1) when made, x <- a x + sqrt(1 - a^2) e with a = exp(-1 / tau), the draw
    their sum / sqrt(6); for a module whose SET_CONFIG entry says action_noise "pink" and
    whose distribution draws N(0, 1) (gaussian, squashed_gaussian)."""
    from rllink.action_dists import PinkNoise

    assert "action_noise" in SetConfig.model_fields and "action_noise" in PolicyDescription.model_fields
    for kit in (KIT, ROOT / "clients" / "godot"):
        pink = read(kit / "addons" / "rllink" / "rllink_pink_noise.gd")
        constants = re.search(r"^const TIME_CONSTANTS = \[(.*)\]$", pink, flags=re.M)
        assert constants and tuple(float(x) for x in constants.group(1).split(",")) == PinkNoise.TIME_CONSTANTS, kit
        assert "Pink Noise Is All You Need" in pink
        assert "\t\t_processes.append(rng.randfn(0.0, 1.0))" in gd_function(pink, "_init")
        step = gd_function(pink, "step")
        for line in (
            "exp(-1.0 / TIME_CONSTANTS[k])",
            "sqrt(1.0 - decay * decay)",
            "_processes[j] = decay * _processes[j] + innovation * _rng.randfn(0.0, 1.0)",
            "draws[i] += _processes[j]",
            "draws[i] /= sqrt(TIME_CONSTANTS.size())",
        ):
            assert line in step, (kit, line)
        pink_dim = gd_function(pink, "pink_dim")
        assert 'module.get("action_noise", "white")) != "pink"' in pink_dim
        assert '["gaussian", "squashed_gaussian"]' in pink_dim
        client = gd_function(read(kit / "addons" / "rllink" / "rllink_client.gd"), "module_for")
        assert '"action_noise"' in client  # the top-level field, for a gateway without policies


def test_the_local_session_draws_pink_noise_anew_each_episode_and_steps_it_before_every_action():
    local = read(ADDON / "rllink_local_session.gd")
    act = gd_function(local, "_act")
    new_episode = act.index("if _chunk == null:  # a new episode")
    started = act.index("_noise = runner.new_noise()")
    stepped = act.index("var draws: Array = _noise.step() if _noise != null else []")
    fed = act.index("runner.act(_obs, _mask, explore and not evaluating, _state, draws)")
    assert new_episode < started < stepped < fed
    assert act.count("_noise.step()") == 1 and "explore" not in act[stepped : act.index("\n", stepped)]  # every step
    assert "_noise = null" in gd_function(local, "end_episode")
    runner = read(ADDON / "rllink_policy_runner.gd")
    assert "return PinkNoise.new(sampler.rng, dim) if dim > 0 else null" in gd_function(runner, "new_noise")
    assert "sampler.sample(outputs, distribution, space, explore, noise)" in gd_function(runner, "act")
    sampler = read(ADDON / "rllink_action_sampler.gd")
    gaussian = sampler[sampler.index("func _gaussian(") : sampler.index("\nstatic func mask_error(")]
    assert "\t\tif explore:\n\t\t\tnoise = draws[i] if not draws.is_empty() else rng.randfn(0.0, 1.0)\n" in gaussian
    # A bundled model has no SET_CONFIG: it samples white noise where it explores at all.
    model_file = read(ADDON / "rllink_model_file_session.gd")
    assert "new_noise" not in model_file and "runner.act(_obs, _mask, explore, _state)" in model_file
    readme = read(KIT / "README.md")
    noise = readme[readme.index("\n**Exploration noise** (") :].split("\n\n")[0]
    assert "`action_noise`" in noise and "never run in a Godot 4" in noise


# -- In a real Godot 4 (skipped without one) ------------------------------------------------------

needs_godot4 = pytest.mark.skipif(GODOT4 is None, reason="no Godot 4 runtime on PATH: install godot4 or set GODOT4 to its binary")
TARGET = 200
RUN_TIMEOUT_S = 300  # a script that does not compile leaves Godot running an empty scene


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A fresh copy of the example with the addon in it, as a game would hold it (Godot
    writes .godot/ into a project)."""
    copy = tmp_path_factory.mktemp("godot4") / "example"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("addons", ".godot"))
    shutil.copytree(ADDON, copy / "addons" / "rllink")
    return copy


def godot_env(project: Path) -> dict[str, str]:
    """Godot's user data and settings under the copy, not in $HOME."""
    home = project.parent / "userdata"
    return {**os.environ, "XDG_DATA_HOME": str(home / "data"), "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_CACHE_HOME": str(home / "cache"), "LANG": "en_US.UTF-8", "LC_ALL": "en_US.UTF-8"}  # fmt: skip


def run_godot(project: Path, *args: str) -> subprocess.CompletedProcess:
    command = [str(GODOT4), "--headless", "--path", str(project), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=godot_env(project))
    print(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}")
    return result


def metrics(gateway: RunningGateway) -> dict:
    import httpx

    return httpx.get(f"{gateway.base_url}/api/metrics", timeout=30).raise_for_status().json()


@needs_godot4
@pytest.mark.e2e
@pytest.mark.slow
def test_the_godot4_cartpole_trains_in_thin_mode_over_tcp(project, tmp_path):
    with running_gateway(gateway_settings(tmp_path)) as gateway:
        result = run_godot(project, "--", "--host", "127.0.0.1", "--port", str(gateway.tcp_port),
                           "--target-return", str(TARGET), "--max-seconds", "180")  # fmt: skip
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        assert "SCRIPT ERROR" not in result.stderr, result.stderr
        line = [line for line in result.stdout.splitlines() if line.startswith("reached the target")][-1]
        words = line.replace(",", "").split()
        mean, episodes, steps, evaluations = float(words[5]), int(words[9]), int(words[11]), int(words[-3])

        def settled() -> dict | None:
            m = metrics(gateway)
            seen = m["num_env_steps_sampled_lifetime"] + m["num_env_steps_evaluated_lifetime"]
            return m if seen >= steps and m["serving"]["open_episodes"] == 0 else None

        after = wait_until(settled, 30, f"the gateway to count {steps} env steps and no open episode")
    assert mean >= TARGET and "inference: thin, transport: tcp" in result.stdout
    # The gateway chose every action and trained on exactly what the game sent.
    assert after["serving"]["actions_served_total"] == steps == after["frames_received"]["GET_ACTION"]
    assert after["num_episodes_lifetime"] + evaluations == episodes == after["frames_received"]["END_EPISODE"]
    # The gateway's evaluation_interval (default 10): the episodes it played with the mode, as the game saw them.
    assert evaluations == after["num_evaluation_episodes_lifetime"] >= 1
    assert after["weights_seq_no"] >= 1 and after["errors"] == {} and after["connections_total"] == {"tcp": 1}


@needs_godot4
def test_the_gdscript_mlp_runtime_computes_what_onnxruntime_computes_in_godot4(project, tmp_path):
    import onnxruntime as ort
    import torch

    from app.spaces.models import BoxSpace, DiscreteSpace
    from app.training.algorithms.ppo.onnx_head import export_onnx
    from app.training.policy import ActorCritic

    torch.manual_seed(0)
    policy = ActorCritic(BoxSpace(shape=(4,)), DiscreteSpace(n=2), (64, 64))
    with torch.no_grad():
        for parameter in policy.parameters():
            parameter.uniform_(-0.5, 0.5)
    model = export_onnx(policy, 3)
    observations = np.random.default_rng(1).uniform(-3, 3, (16, 4)).astype(np.float32)
    (tmp_path / "model.onnx").write_bytes(model)
    (tmp_path / "obs.json").write_text(json.dumps(observations.tolist()))
    result = run_godot(project, "-s", "res://tools/onnx_run.gd", "--", str(tmp_path / "model.onnx"),
                       str(tmp_path / "obs.json"), "4")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    outputs = np.array([json.loads(line[4:]) for line in result.stdout.splitlines() if line.startswith("OUT ")])
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: observations})[0]
    np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)


@needs_godot4
def test_heuristic_masked_pick_play_is_recorded_without_a_gateway_and_loads_in_godot4(project, tmp_path):
    from app.settings.policies import Module, PolicySet
    from app.spaces.models import BoxSpace, DiscreteSpace
    from app.training.algorithms.ppo.config import PPOConfig
    from app.training.demos import load_demos

    demos = tmp_path / "masked_pick.jsonl"
    result = run_godot(project, "res://masked_pick.tscn", "--", "--host", "", "--inference", "heuristic",
                       "--record-demos", str(demos), "--episodes", "5")  # fmt: skip
    assert result.returncode == 0 and "SCRIPT ERROR" not in result.stderr, result.stdout + result.stderr
    assert "masked-pick: 50 decisions, 0 forbidden actions taken" in result.stdout
    reported = [json.loads(line) for line in result.stdout.splitlines() if line.startswith('{"episode"')]
    masked = PolicySet([Module("default_policy", BoxSpace(shape=(12,)), DiscreteSpace(n=6), PPOConfig(), action_masking=True)])
    chunks = load_demos(demos, masked)
    assert len(chunks) == len(reported) == 5
    for chunk, row in zip(chunks, reported, strict=True):
        assert len(chunk.actions) == row["steps"] == 10 and chunk.is_truncated
        assert float(sum(chunk.rewards)) == pytest.approx(row["return"], abs=1e-3)  # Godot prints 6 digits
        mask, obs = np.asarray(chunk.action_mask), np.asarray(chunk.obs)
        np.testing.assert_array_equal(mask, obs[:-1, 6:])
        np.testing.assert_array_equal(chunk.actions, np.where(mask == 1, obs[:-1, :6], -1).argmax(axis=1))


@needs_godot4
@pytest.mark.e2e
@pytest.mark.slow
def test_the_godot4_masked_pick_learns_with_action_masks_and_never_takes_a_forbidden_action(project, tmp_path):
    spaces = {"observation_space": {"type": "box", "shape": [12]}, "action_space": {"type": "discrete", "n": 6}}
    with running_gateway(gateway_settings(tmp_path, action_masking=True, **spaces)) as gateway:
        result = run_godot(project, "res://masked_pick.tscn", "--", "--port", str(gateway.tcp_port),
                           "--target-return", "6.5", "--max-seconds", "240")  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr  # exit 4 at a forbidden action
    assert "reached the target" in result.stdout and ", 0 forbidden actions taken" in result.stdout


@needs_godot4
@pytest.mark.e2e
@pytest.mark.slow
def test_the_godot4_cartpole_plays_every_fifth_local_episode_as_an_evaluation_one(project, tmp_path):
    """Local inference: SET_CONFIG's evaluation_interval 5, so episodes 5, 10, ... of the one
    agent are played with the mode and sent as evaluation chunks, which the gateway counts
    apart and never trains on (the last ones may not have been sent when the game quits)."""
    settings = gateway_settings(tmp_path, evaluation_interval=5, train_batch_size=64, env_steps_per_sample=64)
    with running_gateway(settings) as gateway:
        result = run_godot(project, "--", "--port", str(gateway.tcp_port), "--inference", "local",
                           "--episodes", "40", "--max-seconds", "240")  # fmt: skip
        seen = metrics(gateway)
    assert result.returncode == 0 and "SCRIPT ERROR" not in result.stderr, result.stdout + result.stderr
    line = [line for line in result.stdout.splitlines() if line.startswith("played ")][-1]
    words = line.replace(",", "").split()  # played 40 episodes, N env steps, S.Ss, 8 evaluation episodes
    episodes, steps, evaluations = int(words[1]), int(words[3]), int(words[-3])
    assert episodes == 40 and evaluations == 8
    assert 1 <= seen["num_evaluation_episodes_lifetime"] <= evaluations and seen["evaluation_return_mean"] is not None
    assert seen["num_episodes_lifetime"] + seen["num_evaluation_episodes_lifetime"] <= episodes
    sent = seen["num_env_steps_sampled_lifetime"] + seen["num_env_steps_evaluated_lifetime"]
    assert 0 < seen["num_env_steps_evaluated_lifetime"] and sent <= steps
    assert seen["errors"] == {}


@needs_godot4
@pytest.mark.parametrize("action_masking", [False, True], ids=["plain", "masked"])
def test_the_gdscript_runtime_steps_a_recurrent_model_as_onnxruntime_does_in_godot4(project, tmp_path, action_masking):
    """One episode of 12 steps: zeros as the first state_in, then each state_out fed back,
    in the GDScript runtime (tools/onnx_run.gd) and in onnxruntime; the outputs and the
    states agree at every step (the state's error does not grow over the episode)."""
    import onnxruntime as ort

    model = recurrent_model(action_masking)
    rng = np.random.default_rng(2)
    observations = rng.uniform(-3, 3, (12, 4)).astype(np.float32)
    masks = [[1, 1, 1]] + [[1, 0, 1] if i % 2 else [0, 1, 1] for i in range(11)]
    (tmp_path / "model.onnx").write_bytes(model)
    (tmp_path / "obs.json").write_text(json.dumps(observations.tolist()))
    args = [str(tmp_path / "model.onnx"), str(tmp_path / "obs.json"), "4"]
    if action_masking:
        (tmp_path / "masks.json").write_text(json.dumps(masks))
        args.append(str(tmp_path / "masks.json"))
    result = run_godot(project, "-s", "res://tools/onnx_run.gd", "--", *args)
    assert result.returncode == 0 and "SCRIPT ERROR" not in result.stderr, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    meta = json.loads(next(line[5:] for line in lines if line.startswith("META ")))
    assert meta["state_size"] == 10 and meta["mask_input_name"] == ("action_mask" if action_masking else "")
    outputs = np.array([json.loads(line[4:]) for line in lines if line.startswith("OUT ")])
    states = np.array([json.loads(line[6:]) for line in lines if line.startswith("STATE ")])
    assert outputs.shape == (12, 3) and states.shape == (12, 10)
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    state = np.zeros((1, 10), np.float32)
    for i, obs in enumerate(observations):
        feed = {"obs": obs[None], STATE_INPUT: state}
        if action_masking:
            feed["action_mask"] = np.asarray(masks[i], np.float32)[None]
        expected, state = session.run(["action_dist_inputs", STATE_OUTPUT], feed)
        np.testing.assert_allclose(outputs[i], expected[0], rtol=1e-5, atol=1e-5, err_msg=f"step {i}")
        np.testing.assert_allclose(states[i], state[0], rtol=1e-5, atol=1e-5, err_msg=f"step {i}")
