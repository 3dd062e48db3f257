"""The algorithms' registry (app/training/algorithms/): every algorithm has what docs/architecture.md,
"Adding an algorithm", lists, and reading the registry needs no torch."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import typing
from pathlib import Path

import pytest

from app.http.rest_models import ConfigPatch, Policy, PolicyConfigView, PolicyPatch
from app.settings.config import Settings
from app.settings.hyperparameters import PolicyConfig
from app.settings.policies import ACTION_SPACES
from app.training.algorithms import ALGORITHMS, DEFAULT_ALGORITHM
from app.training.module_learners import Learner

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_every_algorithm_has_its_sections_package_and_learner(name):
    spec = ALGORITHMS[name]
    assert spec.name == name
    assert Settings.model_fields[name].annotation is spec.config, f"Settings has no section {name}: {spec.config.__name__}"
    assert name in PolicyConfig.model_fields, f"PolicyConfig has no field {name}"
    missing = [model.__name__ for model in (Policy, PolicyConfigView, PolicyPatch, ConfigPatch) if name not in model.model_fields]
    assert not missing, f"REST models without a {name} section: {missing}"
    assert f"<!-- settings-table: {name} -->" in (ROOT / "docs" / "configuration.md").read_text()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    assert spec.learner.partition(":")[0].rpartition(".")[0] in packages, f"{spec.learner}'s package is not in the wheel"
    learner_class = spec.learner_class()
    lacking = [method for method in ("restore", "save", "export", "train") if not callable(getattr(learner_class, method, None))]
    assert not lacking, f"{learner_class.__name__} lacks {lacking} of {Learner.__name__}"
    assert set(spec.fixed_while_training) <= set(spec.config.model_fields)
    assert set(spec.self_play_defaults) <= set(spec.config.model_fields)
    assert set(spec.action_spaces) <= set(ACTION_SPACES)


def test_the_names_type_is_the_registry():
    assert typing.get_args(Settings.model_fields["algorithm"].annotation) == tuple(ALGORITHMS)
    assert DEFAULT_ALGORITHM in ALGORITHMS


def test_the_registry_and_the_settings_need_no_torch():
    check = "import sys, app.training.algorithms, app.settings.config; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=ROOT).returncode == 0


def test_a_registry_line_is_all_the_settings_and_rest_need():
    """A new algorithm's sections appear in the settings (flags, environment), a module's
    `policies` entry and REST's models from its registry line alone (a toy one, added before
    they are imported)."""
    script = """
import os
from pydantic import BaseModel, Field
from app.training.algorithms import ALGORITHMS, AlgorithmSpec
from app.training.algorithms.hyperparameter_patch import HyperparameterPatch

class ToyConfig(BaseModel):
    '''Toy hyperparameters.'''
    gamma: float = Field(0.9, gt=0, le=1)

class ToyConfigPatch(HyperparameterPatch):
    gamma: float | None = Field(None, gt=0, le=1)

ALGORITHMS["toy"] = AlgorithmSpec("toy", ToyConfig, ToyConfigPatch, "toy.learner:ToyLearner", summary="a toy")
os.environ["RLLINK_TOY__GAMMA"] = "0.5"
from app.settings.config import Settings
from app.settings.hyperparameters import PolicyConfig
from app.http.rest_models import ConfigPatch, Policy, PolicyConfigView, PolicyPatch
from app.startup.cli import parse_command_line

assert Settings().toy.gamma == 0.5, Settings().toy
assert parse_command_line(["--toy.gamma", "0.25"]).toy.gamma == 0.25
module = PolicyConfig(observation_space={"type": "box", "shape": [1]}, action_space={"type": "discrete", "n": 2}, toy={"gamma": 0.8})
assert module.toy == {"gamma": 0.8}
try:
    PolicyConfig(observation_space={"type": "box", "shape": [1]}, action_space={"type": "discrete", "n": 2}, toy={"gama": 0.8})
    raise SystemExit("an unknown toy hyperparameter was taken")
except ValueError as error:
    assert "gama" in str(error), error
assert ConfigPatch.model_validate({"toy": {"gamma": 0.7}}).toy.changes() == {"gamma": 0.7}
assert PolicyPatch.model_validate({"toy": {"gamma": 0.7}}).toy.gamma == 0.7
assert Policy.model_fields["toy"].annotation == ToyConfig | None
assert PolicyConfigView.model_fields["toy"].annotation == ToyConfig | None
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
