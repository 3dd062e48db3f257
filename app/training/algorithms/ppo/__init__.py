"""PPO (Schulman et al. 2017): `config.py` (PPOConfig), `learner.py` (PPOLearner), `loss.py` (the update),
`onnx_head.py` (the actor-critic's ONNX graph) and `symmetries.py` (batches augmented by the game's symmetries)."""
