"""Environment parameters and curriculum lessons (`env_params`): the lesson logic, the
settings that refuse the start, and a real gateway whose lessons advance as a real client
learns the navigation env, the client getting the new values in SET_STATE, /api/metrics
and TensorBoard showing the lesson, and a restart resuming it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.settings.config import Settings
from app.settings.env_params import CurriculumSetting
from app.settings.policies import PolicySet
from app.telemetry.tensorboard import read_scalars
from app.training.curriculum import Curriculum
from app.training.curriculum_files import CURRICULUM_FILE
from rllink_clients.navigation import FullDifficultyTarget, NavigationEnv, play
from rllink_clients.rllink_client import RLlinkClient
from tests.browser import NEEDS_BROWSER, open_page
from tests.gateway_process import ROOT, free_port
from tests.helpers import gateway_settings, running_gateway

NAVIGATION_SPACES = {
    "observation_space": {"type": "box", "shape": [2], "low": -1.0, "high": 1.0},
    "action_space": {"type": "discrete", "n": 2},
}


def lesson(name: str, value: Any, threshold: float | None = None, min_episodes: int = 5, **criteria: Any) -> dict:
    done = {"threshold": threshold, "min_episodes": min_episodes, **criteria}
    return {"name": name, "value": value, **({"completion_criteria": done} if threshold is not None else {})}


def curriculum(*lessons: dict) -> dict:
    return {"curriculum": list(lessons)}


def settings_of(env_params: dict, **more: Any) -> Settings:
    return Settings(env_params=env_params, **more)


def curriculum_of(env_params: dict, **more: Any) -> Curriculum:
    settings = settings_of(env_params, **more)
    return Curriculum(settings.env_params, PolicySet.from_settings(settings).default_module_id)


# -- The lessons ----------------------------------------------------------------------


def test_values_are_the_constants_and_each_curriculums_first_lesson() -> None:
    lessons = curriculum_of(
        {"speed": 2.5, "name": "arena", "fog": False, "count": 3, "goal": curriculum(lesson("a", 2, 0.5), lesson("b", 9))}
    )
    assert lessons.values == {"speed": 2.5, "name": "arena", "fog": False, "count": 3, "goal": 2}
    assert [type(v) for v in lessons.values.values()] == [float, str, bool, int, int]  # the types survive
    assert lessons.status()["goal"]["lesson"] == 0 and not lessons.record_episode("default_policy", 1.0, 3)


def test_a_lesson_lasts_min_episodes_then_advances_on_the_mean_of_its_own_episodes() -> None:
    lessons = curriculum_of({"goal": curriculum(lesson("easy", 2, 0.5, 4), lesson("mid", 5, 0.5, 4), lesson("hard", 9))})
    changes = [lessons.record_episode("default_policy", 1.0, 10) for _ in range(3)]
    assert changes == [[], [], []] and lessons.values["goal"] == 2  # above the threshold, but 3 episodes < 4
    [change] = lessons.record_episode("default_policy", 1.0, 10)
    assert (change.param, change.from_lesson, change.to_lesson, change.to_index) == ("goal", "easy", "mid", 1)
    assert change.measured == 1.0 and change.threshold == 0.5 and change.episodes == 4
    assert "goal: lesson 'easy' -> 'mid'" in change.describe() and lessons.values["goal"] == 5
    # The next lesson counts from 0: the easy lesson's successes do not carry over, nor do the
    # episodes that end before its value is published (the clients played them with the old one).
    for _ in range(5):
        assert lessons.record_episode("default_policy", 1.0, 10) == []
    status = lessons.status()["goal"]
    assert (status["lesson"], status["episodes"], status["measured"]) == (1, 0, None)
    lessons.published()
    for _ in range(3):
        assert lessons.record_episode("default_policy", 1.0, 10) == []
    [change] = lessons.record_episode("default_policy", 0.0, 10)  # 1, 1, 1, 0: mean 0.75 >= 0.5
    assert (change.to_lesson, change.measured) == ("hard", 0.75) and lessons.values["goal"] == 9
    assert lessons.record_episode("default_policy", 1.0, 10) == []  # the last lesson lasts to the end
    assert lessons.status()["goal"]["threshold"] is None and lessons.changes == 2


def test_the_measure_is_the_mean_of_the_last_min_episodes_only() -> None:
    lessons = curriculum_of({"goal": curriculum(lesson("easy", 2, 0.75, 4), lesson("hard", 9))})
    for episode_return in (0.0, 0.0, 0.0, 1.0, 1.0):  # means over the last 4: 0.25 at the 4th, 0.5 at the 5th
        assert lessons.record_episode("default_policy", episode_return, 10) == []
    assert lessons.status()["goal"]["measured"] == 0.5 and lessons.status()["goal"]["episodes"] == 5
    [change] = lessons.record_episode("default_policy", 1.0, 10)  # the window: 0, 1, 1, 1
    assert change.measured == 0.75 and lessons.values["goal"] == 9


def test_only_the_criterions_module_counts_and_episode_len_mean_is_measured() -> None:
    two = {
        "policies": {"walker": NAVIGATION_SPACES, "runner": NAVIGATION_SPACES},
        "policy_mapping": {"w*": "walker", "*": "runner"},
    }
    lessons = curriculum_of(
        {"length": curriculum(lesson("short", 1, 30, 2, module_id="runner", measure="episode_len_mean"), lesson("long", 2))}, **two
    )
    for _ in range(5):
        assert lessons.record_episode("walker", 0.0, 100) == []  # another module's episodes
    assert lessons.status()["length"]["episodes"] == 0
    assert lessons.record_episode("runner", 0.0, 20) == []
    assert lessons.record_episode("runner", 0.0, 20) == []  # mean length 20 < 30
    [change] = lessons.record_episode("runner", 0.0, 40)  # 20, 40: mean 30
    assert change.measure == "episode_len_mean" and change.measured == 30 and lessons.values["length"] == 2


def test_state_restores_the_lesson_and_its_episodes_and_a_changed_curriculum_starts_again() -> None:
    params = {"goal": curriculum(lesson("easy", 2, 0.5, 3), lesson("mid", 5, 0.9, 3), lesson("hard", 9))}
    lessons = curriculum_of(params)
    for _ in range(3):
        lessons.record_episode("default_policy", 1.0, 5)
    lessons.published()
    lessons.record_episode("default_policy", 0.0, 5)
    saved = json.loads(json.dumps(lessons.state()))
    resumed = curriculum_of(params)
    assert resumed.restore(saved) == ["goal: lesson 1 ('mid') resumed after 1 episodes"]
    assert resumed.values["goal"] == 5 and resumed.status()["goal"]["measured"] == 0.0
    renamed = curriculum_of({"goal": curriculum(lesson("easy", 2, 0.5, 3), lesson("medium", 5, 0.9, 3), lesson("hard", 9))})
    assert "starts at the first" in renamed.restore(saved)[0] and renamed.values["goal"] == 2
    assert "no longer a curriculum" in curriculum_of({"goal": 3}).restore(saved)[0]


# -- Settings that refuse the start -------------------------------------------------------


@pytest.mark.parametrize(
    ("env_params", "message"),
    [
        ({"goal": curriculum()}, "a curriculum needs at least one lesson"),
        ({"goal": curriculum(lesson("a", 1, 0.5))}, "the last lesson, 'a', has completion_criteria"),
        ({"goal": curriculum(lesson("a", 1), lesson("b", 2))}, "lesson 'a' has no completion_criteria"),
        ({"goal": curriculum(lesson("a", 1, 0.5), lesson("a", 2))}, "lesson names must be unique"),
        ({"goal": curriculum(lesson("a", 1, 0.5, module_id="nope"), lesson("b", 2))}, "module_id 'nope' is not a trained module"),
        ({"goal": curriculum(lesson("a", 1, 0.5, measure="win_rate"), lesson("b", 2))}, "episode_return_mean"),
        ({"goal": curriculum(lesson("a", 1, 0.5, 0), lesson("b", 2))}, "min_episodes"),
        ({"goal": {"lessons": []}}, "curriculum"),
        ({"goal": [1, 2]}, "env_params.goal"),
        ({"": 1}, "a parameter name must not be empty"),
    ],
)
def test_bad_env_params_are_refused_with_what_is_wrong(env_params: dict, message: str) -> None:
    with pytest.raises(ValidationError, match="env_params") as refused:
        settings_of(env_params)
    assert message in str(refused.value)


def test_lessons_are_refused_with_ray_and_constants_are_not() -> None:
    with pytest.raises(ValidationError, match="curriculum lessons \\(goal\\) are not supported with ray_address"):
        settings_of({"goal": curriculum(lesson("a", 1, 0.5), lesson("b", 2))}, ray_address="auto")
    assert settings_of({"goal": 3}, ray_address="auto").env_params == {"goal": 3}


def test_the_gateway_refuses_to_start_with_a_bad_curriculum_in_its_yaml(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "env_params:\n  goal_distance:\n    curriculum:\n      - {name: easy, value: 2, completion_criteria: {threshold: 1}}\n"
    )
    command = [sys.executable, "-m", "app", "--config", str(config), "--http-port", str(free_port()), "--tcp-port", str(free_port())]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "the last lesson, 'easy', has completion_criteria" in done.stdout + done.stderr


# -- A real gateway, a real client that learns --------------------------------------------

LESSONS = {
    "goal_distance": curriculum(
        lesson("near", 2, 0.6, 20),  # random play reaches a goal 2 away in ~70% of episodes: done at once
        lesson("middle", 6, 0.9, 20),  # random play: ~35%; done once the client learned to walk right
        lesson("far", NavigationEnv.MAX_DISTANCE),
    ),
    "arena": "line",
}


def navigation_gateway(tmp_path: Path):
    return running_gateway(
        gateway_settings(
            tmp_path, **NAVIGATION_SPACES, env_params=LESSONS, env_steps_per_sample=500, train_batch_size=1000,
            tensorboard_dir=tmp_path / "tensorboard", decode_workers=0,
        )
    )  # fmt: skip


@pytest.mark.slow
def test_lessons_advance_as_a_real_client_learns_and_it_gets_the_values_in_set_state(tmp_path: Path) -> None:
    with navigation_gateway(tmp_path) as gateway:
        with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
            sent: list[dict] = []
            receive = client.receive

            def recording() -> dict:
                sent.append(message := receive())
                return message

            client.receive = recording  # type: ignore[method-assign]  # every message as the client got it
            target = FullDifficultyTarget(0.0)  # stop after 20 episodes at the far goal
            result = play(client, target, max_env_steps=150_000, max_seconds=600)
            assert target.stop.is_set(), f"the last lesson never came in {result.env_steps} env steps: {client.env_params}"
            assert client.get_env_param("goal_distance") == NavigationEnv.MAX_DISTANCE
            assert client.get_env_param("arena") == "line" and client.get_env_param("missing", 7) == 7
        config, states = sent[0], [m for m in sent if m["type"] == "SET_STATE"]
        assert config["type"] == "SET_CONFIG" and config["env_params"] == {"goal_distance": 2, "arena": "line"}
        assert "env_params" not in states[0]  # before any lesson changed: absent on the wire
        carried = [m["env_params"]["goal_distance"] for m in states if "env_params" in m]
        assert carried[0] == 6 and carried[-1] == NavigationEnv.MAX_DISTANCE, carried
        metrics = httpx.get(gateway.base_url + "/api/metrics", timeout=30).json()
        assert metrics["env_params"] == {"goal_distance": NavigationEnv.MAX_DISTANCE, "arena": "line"}
        status = metrics["curriculum"]["goal_distance"]
        assert (status["lesson"], status["lesson_name"], status["lessons"], status["threshold"]) == (2, "far", 3, None)
        assert httpx.get(gateway.base_url + "/api/config", timeout=30).json()["env_params"]["goal_distance"]["curriculum"][2] == {
            "name": "far", "value": NavigationEnv.MAX_DISTANCE, "completion_criteria": None,
        }  # fmt: skip
    saved = json.loads((tmp_path / "checkpoints" / CURRICULUM_FILE).read_text())
    assert saved["goal_distance"]["lesson_name"] == "far"
    lesson_index = [value for _, value in read_scalars(tmp_path / "tensorboard")["curriculum/goal_distance"]]
    assert lesson_index[0] <= 1 and lesson_index[-1] == 2, lesson_index

    # A restart resumes the lesson: the first SET_CONFIG already says the far goal.
    with navigation_gateway(tmp_path) as gateway, RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
        assert client.request({"type": "GET_CONFIG"})["env_params"]["goal_distance"] == NavigationEnv.MAX_DISTANCE
        assert httpx.get(gateway.base_url + "/api/metrics", timeout=30).json()["curriculum"]["goal_distance"]["lesson"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("num_envs", [1, 4])
def test_a_thin_client_follows_the_lessons_too(tmp_path: Path, num_envs: int) -> None:
    params = {"goal_distance": curriculum(lesson("near", 2, 0.6, 20), lesson("far", NavigationEnv.MAX_DISTANCE))}
    settings = gateway_settings(tmp_path, **NAVIGATION_SPACES, env_params=params, train_batch_size=500, decode_workers=0)
    with running_gateway(settings) as gateway, RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
        target = FullDifficultyTarget(0.0)  # stops after 50 episodes at the far goal
        result = play(client, target, inference="server", max_env_steps=50_000, max_seconds=600, num_envs=num_envs)
        assert target.stop.is_set(), f"the thin client never played the far goal in {result.env_steps} env steps"
        assert client.get_env_param("goal_distance") == NavigationEnv.MAX_DISTANCE


def test_a_curriculum_of_one_lesson_and_constants_go_out_in_set_config(tmp_path: Path) -> None:
    params = {"level": curriculum(lesson("only", "maze")), "gravity": 9.81}
    with running_gateway(gateway_settings(tmp_path, env_params=params, decode_workers=0)) as gateway:
        with RLlinkClient("ws", "127.0.0.1", gateway.http_port) as client:
            assert client.request({"type": "GET_CONFIG"})["env_params"] == {"level": "maze", "gravity": 9.81}
            assert client.get_env_param("gravity") == 9.81
            assert "env_params" not in client.request({"type": "GET_STATE"})
        metrics = httpx.get(gateway.base_url + "/api/metrics", timeout=30).json()
        assert metrics["curriculum"]["level"]["lesson_name"] == "only" and metrics["env_params"]["level"] == "maze"


def test_without_env_params_set_config_carries_an_empty_mapping(tmp_path: Path) -> None:
    with running_gateway(gateway_settings(tmp_path, decode_workers=0)) as gateway:
        with RLlinkClient("tcp", "127.0.0.1", gateway.tcp_port) as client:
            assert client.request({"type": "GET_CONFIG"})["env_params"] == {}
            assert client.get_env_param("goal_distance", 20) == 20
        assert httpx.get(gateway.base_url + "/api/metrics", timeout=30).json()["curriculum"] == {}


# The dashboard's table of environment parameters: parameter -> {data-key of the cell: its text}.
READ_ENV_PARAMS_JS = """() => Object.fromEntries([...document.querySelectorAll('#env-params tbody tr')].map((row) =>
  [row.dataset.param, Object.fromEntries([...row.cells].map((cell) => [cell.dataset.key, cell.textContent]))]))"""


def needs_browser(test: Any) -> Any:
    """The marks of tests/browser.py's NEEDS_BROWSER on one test (the others need no browser)."""
    for mark in NEEDS_BROWSER:
        test = mark(test)
    return test


@needs_browser
def test_the_dashboard_shows_each_parameter_and_its_lesson(tmp_path: Path, browser: Any) -> None:
    with navigation_gateway(tmp_path) as gateway, open_page(browser, gateway.base_url + "/") as page:
        page.wait_for("#env-params tbody tr", 60)
        rows = page.page.evaluate(READ_ENV_PARAMS_JS)
    assert rows == {
        "arena": {"param": "arena", "value": "line", "lesson": "constant", "episodes": "—", "progress": "—"},
        "goal_distance": {
            "param": "goal_distance", "value": "2", "lesson": "1/3 near", "episodes": "0",
            "progress": "episode_return_mean — / 0.6",
        },
    }, rows  # fmt: skip
    assert not [line for line in page.console if line.startswith(("error", "uncaught"))], page.console


def test_curriculum_setting_round_trips_through_json() -> None:
    setting = CurriculumSetting.model_validate(LESSONS["goal_distance"])
    assert CurriculumSetting.model_validate_json(setting.model_dump_json()) == setting
