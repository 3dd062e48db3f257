"""FastAPI dependencies for the state shared by every route: settings, service, counters, workers."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from app.config import Settings
from app.decode_workers import DecodeWorkers
from app.traffic import TrafficStats
from app.training.service import TrainingService


def get_settings(connection: HTTPConnection) -> Settings:
    return connection.app.state.settings


def get_service(connection: HTTPConnection) -> TrainingService:
    return connection.app.state.service


def get_traffic(connection: HTTPConnection) -> TrafficStats:
    return connection.app.state.traffic


def get_decoders(connection: HTTPConnection) -> DecodeWorkers:
    return connection.app.state.decoders
