"""Both training services implement the protocol the rest of the gateway is typed against.

`LocalTrainingService` trains in this process; a Ray front-end's `RemoteTrainingService`
forwards to the learner actor. Each member of `TrainingService` must exist on both with the
same kind (attribute, property, method, coroutine) and the same parameters, so that the
transports, the application, serving and REST work on either unchanged.
"""

from __future__ import annotations

import inspect

import pytest

from app.cluster.remote_service import RemoteTrainingService
from app.settings.config import Settings
from app.training.interface import TrainingService
from app.training.service import LocalTrainingService

from .helpers import gateway_settings


def members(cls: type) -> dict[str, str]:
    """The protocol's members and their kinds: attribute, property, coroutine or method."""
    found = {name: "attribute" for name in getattr(cls, "__annotations__", {})}
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, property):
            found[name] = "property"
        elif inspect.iscoroutinefunction(value):
            found[name] = "coroutine"
        elif inspect.isfunction(value):
            found[name] = "method"
    return found


def kind_on(instance: object, cls: type, name: str) -> str:
    declared = inspect.getattr_static(cls, name, None)
    if isinstance(declared, property):
        return "property"
    if inspect.iscoroutinefunction(declared):
        return "coroutine"
    if inspect.isfunction(declared):
        return "method"
    if name in vars(instance):
        return "attribute"
    return "missing"


def parameters(function) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]


PROTOCOL = members(TrainingService)


def test_the_protocol_names_what_the_gateway_uses():
    # The calls the application, serving and REST make on a training service.
    for name in ["connect", "disconnect", "ingest", "wait_for_training", "current_state", "change_config", "metrics"]:
        assert name in PROTOCOL


@pytest.fixture
def local(tmp_path) -> LocalTrainingService:
    return LocalTrainingService(gateway_settings(tmp_path))


@pytest.fixture
def remote(tmp_path) -> RemoteTrainingService:
    return RemoteTrainingService(Settings(checkpoint_dir=tmp_path / "checkpoints"), learner=None, frontend=0)


def differences(service: object, cls: type) -> dict[str, str]:
    """Each protocol member `cls` lacks or has in another kind or with other parameters."""
    wrong = {}
    for name, kind in PROTOCOL.items():
        have = kind_on(service, cls, name)
        # a read-only property may be implemented by a plain attribute, and the other way round
        if have != kind and {have, kind} != {"attribute", "property"}:
            wrong[name] = f"{have}, the protocol says {kind}"
        elif kind in ("method", "coroutine"):
            theirs, ours = parameters(getattr(cls, name)), parameters(getattr(TrainingService, name))
            if theirs != ours:
                wrong[name] = f"parameters {theirs}, the protocol says {ours}"
    return wrong


@pytest.mark.parametrize("implementation", ["local", "remote"])
def test_each_service_has_every_member_of_the_protocol(implementation, request):
    service = request.getfixturevalue(implementation)
    assert not differences(service, type(service)), f"{type(service).__name__} differs from TrainingService"


def test_a_service_that_differs_is_found(local):
    class Differs(LocalTrainingService):
        kept_state = None  # no longer a method
        async def connect(self, transport: str, peer: str):  # a coroutine where a method is due
            raise NotImplementedError
        def ingest(self, client, episodes):  # a parameter fewer
            raise NotImplementedError

    assert set(differences(local, Differs)) == {"kept_state", "connect", "ingest"}
