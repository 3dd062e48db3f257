"""REST routes: health, metrics (JSON and Prometheus), config, clients, the ONNX model."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any, NoReturn

import orjson
from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BaseModel
from starlette.routing import compile_path

from app.gateway import Gateway
from app.http.auth import require_token
from app.http.dependencies import get_gateway
from app.http.prometheus import render_prometheus
from app.http.rest_models import (
    SHOWN_FOR_EVERY_MODULE,
    Client,
    ConfigPatch,
    GatewayConfig,
    Health,
    Limits,
    Metrics,
    MetricsHistoryView,
    Policy,
    PolicyConfigView,
    PopulationStatus,
    SelfPlayStatus,
)
from app.settings.config import Settings
from app.settings.hyperparameters import DEFAULT_MODULE_ID
from app.settings.policies import Module, hyperparameters
from app.training.algorithms import ALGORITHMS
from app.training.interface import LearnerUnreachable
from app.training.module_configs import ConfigRefused
from app.training.policy_state import PolicyState
from app.training.status import TrainingStatus

# Health stays open for liveness probes; everything else needs the token when auth is on.
health_router = APIRouter(prefix="/api", tags=["gateway"])
router = APIRouter(prefix="/api", tags=["gateway"], dependencies=[Depends(require_token)])
metrics_router = APIRouter(tags=["gateway"], dependencies=[Depends(require_token)])

ONNX_MEDIA_TYPE = "application/octet-stream"


def collect_metrics(gateway: Gateway) -> Metrics:
    """One consistent snapshot of training progress and traffic. Call it on the event
    loop (from `async def` routes), where the service changes: read from a worker thread,
    the counters could change halfway through and not add up."""
    service, traffic = gateway.service, gateway.traffic
    status = service.status()
    snapshot = service.metrics.snapshot()
    for module_id, league in status.leagues.items():
        snapshot["policies"][module_id]["elo"] = league.elo
        snapshot["policies"][module_id]["league_records"] = league.records.rows()
    clients: dict[str, int] = {"tcp": 0, "ws": 0}
    for client in status.clients:
        clients[client.transport] = clients.get(client.transport, 0) + 1
    serving = gateway.serving
    return Metrics(
        **snapshot,
        serving={**serving.metrics.snapshot(), "open_episode_steps": serving.open_episode_steps},
        env_steps_per_s=service.metrics.env_steps_per_s(),
        pending_env_steps=status.pending_env_steps,
        training_env_steps=status.training_env_steps,
        training_in_progress=status.training_in_progress,
        clients=clients,
        connections_total=dict(traffic.connections_total),
        frames_received=dict(traffic.frames_received),
        errors=dict(traffic.errors),
        bytes_received=traffic.bytes_received,
        bytes_sent=traffic.bytes_sent,
        uptime_s=time.monotonic() - traffic.started_at,
        env_params=service.current_state().env_params,
        curriculum=status.curriculum,
    )


@health_router.get("/health", response_model=Health, summary="Liveness and the current policy version")
def health(gateway: Gateway = Depends(get_gateway)) -> Health:
    return Health(
        status="ok",
        weights_seq_no=gateway.service.current_state().weights_seq_no,
        uptime_s=time.monotonic() - gateway.traffic.started_at,
    )


# HEAD too, for probes and monitors that check with it: the same status and headers, no body.
health_router.add_api_route(
    "/health", health, methods=["HEAD"], name="health_head", response_model=Health,
    summary="Liveness: the status of GET /api/health, no body",
)


@router.get("/metrics", response_model=Metrics, summary="Training progress, learner stats and traffic")
async def metrics(gateway: Gateway = Depends(get_gateway)) -> Metrics:
    return collect_metrics(gateway)


@router.get(
    "/metrics/history",
    response_model=MetricsHistoryView,
    summary="The run's metrics at every training step, for charts drawn from the start",
    description="A snapshot of `/api/metrics` after each training step, oldest first. Bounded: when "
    "`max_points` are kept, every other one is dropped and `stride` doubles (one of every `stride` steps is "
    "kept from then on), so the points always span the whole run.",
)
async def metrics_history(gateway: Gateway = Depends(get_gateway)) -> Response:
    # Serialised as kept (each point was a validated Metrics): validating up to 2,000 models
    # again would hold the event loop for a noticeable time.
    history = gateway.history
    body = {"points": history.points, "stride": history.stride, "max_points": history.max_points}
    return Response(orjson.dumps(body), media_type="application/json")


@metrics_router.get(
    "/metrics",
    response_class=Response,
    summary="The same metrics in Prometheus text format",
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus exposition format."}},
)
async def prometheus_metrics(gateway: Gateway = Depends(get_gateway)) -> Response:
    return Response(render_prometheus(collect_metrics(gateway)), media_type=CONTENT_TYPE_LATEST)


@router.get("/clients", response_model=list[Client], summary="Connected simulators")
def clients(gateway: Gateway = Depends(get_gateway)) -> list[Client]:
    return [Client.model_validate(client, from_attributes=True) for client in gateway.service.status().clients]


def hyperparameter_sections(settings: Settings, status: TrainingStatus, module: Module) -> dict[str, BaseModel | None]:
    """A module's hyperparameters as REST shows them, a section per algorithm: the ones it trains
    with now, under its algorithm's name; PPO's too for a module of another algorithm (the
    settings' ones); None for the others and for a frozen opponent."""
    sections: dict[str, BaseModel | None] = dict.fromkeys(ALGORITHMS)
    if module.trainable:
        sections[SHOWN_FOR_EVERY_MODULE] = hyperparameters(settings, SHOWN_FOR_EVERY_MODULE, module.module_id)
        sections[status.algorithm_of(module.module_id)] = status.module_config(module.module_id)
    return sections


def module_training(settings: Settings, status: TrainingStatus, module: Module) -> dict[str, Any]:
    """What /api/config and /api/policies both say of a module: its spaces and how it trains."""
    return {
        "observation_space": module.observation_space,
        "action_space": module.action_space,
        "trainable": module.trainable,
        "opponent_of": module.opponent_of,
        "algorithm": module.algorithm,
        "action_masking": module.action_masking,
        **hyperparameter_sections(settings, status, module),
    }


def current_config(gateway: Gateway) -> GatewayConfig:
    settings, status, policies = gateway.settings, gateway.service.status(), gateway.policies
    derived = {
        "onnx_output_names", "ppo", "policies", "policy_mapping", "limits", "auth_enabled", "tls_enabled",
        "force_on_policy", "device", "observation_space", "action_space",
    }
    return GatewayConfig(
        observation_space=policies.default.observation_space,  # adopted from a game, if it declared them
        action_space=policies.default.action_space,
        **settings.model_dump(include=set(GatewayConfig.model_fields) - derived),
        force_on_policy=status.force_on_policy,
        device=status.device,
        onnx_output_names=status.onnx_output_names,
        ppo=hyperparameter_sections(settings, status, policies.default)[SHOWN_FOR_EVERY_MODULE],
        policies={
            module.module_id: PolicyConfigView(**module_training(settings, status, module), self_play=module.self_play)
            for module in policies.modules.values()
        },
        policy_mapping=policies.mapping,
        default_module_id=policies.default_module_id,
        limits=Limits(**settings.model_dump(include=set(Limits.model_fields))),
        auth_enabled=settings.auth_token is not None,
        tls_enabled=settings.tls_enabled,
    )


@router.get("/config", response_model=GatewayConfig, summary="The current gateway and training configuration")
def get_config(gateway: Gateway = Depends(get_gateway)) -> GatewayConfig:
    return current_config(gateway)


@router.patch(
    "/config",
    response_model=GatewayConfig,
    summary="Change PPO or SAC hyperparameters while training",
    description=(
        "Takes effect from the next training step. `ppo` changes every module that trains with PPO, `sac` every "
        "module that trains with SAC; `policies: {module_id: {ppo: ...}}` (or `sac`) one module. Hyperparameters of "
        "an algorithm no module (or not that module) trains with are refused with 409, invalid values with 422, "
        "and then nothing changes."
    ),
    responses={
        400: {"description": "The body could not be read (not UTF-8 text)."},
        404: {"description": "`policies` names a module the gateway does not have."},
        409: {"description": "Hyperparameters of an algorithm that no module, or not that module, trains with."},
        503: {
            "description": "On Ray: the learner did not answer in time (it may be restarting); "
            "GET /api/config shows whether the change was made."
        },
    },
)
def patch_config(patch: ConfigPatch, gateway: Gateway = Depends(get_gateway)) -> GatewayConfig:
    service = gateway.service
    status = service.status()
    if unknown := [module_id for module_id in patch.policies if module_id not in gateway.policies.modules]:
        modules = ", ".join(gateway.policies.modules)
        raise HTTPException(status_code=404, detail=f"no module {', '.join(map(repr, unknown))}; modules: {modules}")
    changes = []  # (where in the body, module, algorithm, its changes)
    for algorithm in ALGORITHMS:
        if (everyone := getattr(patch, algorithm)) is not None:
            modules = [m.module_id for m in gateway.policies.trainable if status.algorithm_of(m.module_id) == algorithm]
            if not modules:
                raise HTTPException(status_code=409, detail=f"no module trains with {algorithm}: there is nothing to change")
            changes += [(["body", algorithm], module_id, algorithm, everyone.changes()) for module_id in modules]
        for module_id, one in patch.policies.items():
            if (mine := getattr(one, algorithm)) is not None:
                changes.append((["body", "policies", module_id, algorithm], module_id, algorithm, mine.changes()))
    try:  # all checked before any is made
        service.change_config([(module_id, algorithm, values) for _, module_id, algorithm, values in changes])
    except ConfigRefused as exc:
        if exc.wrong_algorithm:
            raise HTTPException(status_code=409, detail=exc.message) from None
        _refuse(changes[exc.index][0], exc.message)
    except LearnerUnreachable as exc:
        raise HTTPException(status_code=503, detail=str(exc)) from None
    return current_config(gateway)


def _refuse(loc: list[str], message: str) -> NoReturn:
    """A 422 shaped like FastAPI's own, as the schema says."""
    raise HTTPException(status_code=422, detail=[{"loc": loc, "msg": message, "type": "value_error"}])


MODEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {ONNX_MEDIA_TYPE: {}}, "description": "The ONNX model."},
    304: {"description": "The client's copy (If-None-Match) is current."},
    404: {"description": "That version is not kept."},
}
# HEAD: what GET would answer, headers only (ETag, X-Weights-Seq-No, Content-Length),
# so that a client can see whether its copy is current, and how large the file is. The
# same endpoint answers it: the server sends no body to a HEAD request (HTTP's rule,
# which uvicorn keeps), the Content-Length stays the file's.
HEAD_DESCRIPTION = "As GET, with the same headers (`ETag`, `X-Weights-Seq-No`, `Content-Length`) and no body."
HEAD_RESPONSES = {**MODEL_RESPONSES, 200: {**MODEL_RESPONSES[200], "description": "The ONNX model's headers, no body."}}


@router.get(
    "/model.onnx",
    response_class=Response,
    summary="The policy as a plain ONNX file",
    description=(
        "The current policy, or the kept version given by `?version=`. `ETag` is the weights version; "
        "send it back in `If-None-Match` to get 304 when nothing changed. HEAD answers the same headers, no body."
    ),
    responses=MODEL_RESPONSES,
)
def model_onnx(
    version: int | None = Query(None, ge=0, description="A kept older version; default the current one."),
    if_none_match: str | None = Header(None),
    gateway: Gateway = Depends(get_gateway),
) -> Response:
    return onnx_response(gateway, gateway.policies.default_module_id, version, if_none_match)


router.add_api_route(
    "/model.onnx", model_onnx, methods=["HEAD"], name="model_onnx_head", response_class=Response,
    summary="The policy's ONNX file: its headers only", description=HEAD_DESCRIPTION, responses=HEAD_RESPONSES,
)


def onnx_response(gateway: Gateway, module_id: str, version: int | None, if_none_match: str | None) -> Response:
    """One module's ONNX file at the current or a kept version; 304 when the client's ETag is current.
    The ETag is the version in which that module's weights last changed."""
    service = gateway.service
    published = service.current_state() if version is None else service.kept_state(version)
    if published is None:
        kept = ", ".join(str(v) for v in service.kept_versions)
        raise HTTPException(status_code=404, detail=f"version {version} is not kept; kept versions: {kept}")
    state: PolicyState = published.modules[module_id]
    etag = f'"{state.weights_seq_no}"'
    headers = {"ETag": etag, "X-Weights-Seq-No": str(state.weights_seq_no), "Cache-Control": "no-cache"}
    if if_none_match is not None and etag in {tag.strip() for tag in if_none_match.split(",")}:
        return Response(status_code=304, headers=headers)
    name = "policy" if module_id == DEFAULT_MODULE_ID else module_id
    headers["Content-Disposition"] = f'attachment; filename="{name}-v{state.weights_seq_no}.onnx"'
    return Response(state.onnx_bytes, media_type=ONNX_MEDIA_TYPE, headers=headers)


@router.get("/policies", response_model=list[Policy], summary="Every module: spaces, version, progress, rating")
async def list_policies(gateway: Gateway = Depends(get_gateway)) -> list[Policy]:
    service = gateway.service
    metrics = collect_metrics(gateway).policies
    published, status = service.current_state(), service.status()
    listed = []
    for module in gateway.policies.modules.values():
        league = status.leagues.get(module.module_id)
        listed.append(
            Policy(
                module_id=module.module_id,
                action_distribution=module.action_distribution,
                action_noise=module.action_noise,
                **module_training(gateway.settings, status, module),
                self_play=SelfPlayStatus(**league.summary(), exploiter=status.exploiters.get(module.module_id))
                if league is not None
                else None,
                population=PopulationStatus(**population) if (population := status.populations.get(module.module_id)) else None,
                member_of=module.member_of,
                best_model=asdict(best) if (best := status.best_models.get(module.module_id)) else None,
                **{
                    **metrics[module.module_id].model_dump(),
                    # An opponent's version is that of the snapshot it plays now.
                    **({} if module.trainable else {"weights_seq_no": published.modules[module.module_id].weights_seq_no}),
                },
            )
        )
    return listed


MODULE_MODEL_RESPONSES = {**MODEL_RESPONSES, 404: {"description": "No such module, or that version is not kept."}}


@router.get(
    "/policies/{module_id}/model.onnx",
    response_class=Response,
    summary="One module's policy as a plain ONNX file",
    description="As `/api/model.onnx`, for any module (a self-play opponent's is the snapshot it plays now).",
    responses=MODULE_MODEL_RESPONSES,
)
def module_model_onnx(
    module_id: str,
    version: int | None = Query(None, ge=0, description="A kept older version; default the current one."),
    if_none_match: str | None = Header(None),
    gateway: Gateway = Depends(get_gateway),
) -> Response:
    if module_id not in gateway.policies.modules:
        modules = ", ".join(gateway.policies.modules)
        raise HTTPException(status_code=404, detail=f"no module {module_id!r}; modules: {modules}")
    return onnx_response(gateway, module_id, version, if_none_match)


router.add_api_route(
    "/policies/{module_id}/model.onnx", module_model_onnx, methods=["HEAD"], name="module_model_onnx_head",
    response_class=Response, summary="One module's ONNX file: its headers only", description=HEAD_DESCRIPTION,
    responses={**HEAD_RESPONSES, 404: MODULE_MODEL_RESPONSES[404]},
)


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    """405 whose `Allow` lists every method of the path. Starlette's names only the
    methods of the first route for the path, and GET and PATCH /api/config are two:
    the OpenAPI schema knows them all."""
    headers = getattr(exc, "headers", None) or {}
    methods = {method.strip() for method in headers.get("Allow", "").split(",") if method.strip()}
    for path, operations in request.app.openapi().get("paths", {}).items():
        if compile_path(path)[0].match(request.url.path):
            methods |= {method.upper() for method in operations}
    detail = getattr(exc, "detail", "Method Not Allowed")
    return JSONResponse({"detail": detail}, status_code=405, headers={"Allow": ", ".join(sorted(methods))})
