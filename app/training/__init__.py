"""PPO training for the gateway: one shared learner fed by every connected simulator."""

from app.training.onnx_export import PolicyState
from app.training.service import ClientInfo, TrainingService

__all__ = ["ClientInfo", "PolicyState", "TrainingService"]
