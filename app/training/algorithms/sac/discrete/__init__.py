"""SAC for Discrete actions (Christodoulou 2019): `networks.py`, `loss.py` and `onnx_head.py`; SAC's
learner, registry entry and config (`algorithm: sac` with a Discrete action space: no config of its own)."""
