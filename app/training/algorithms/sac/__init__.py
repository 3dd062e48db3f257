"""SAC (Haarnoja et al. 2018): `config.py` (SACConfig), `learner.py` (SACLearner, for Box and Discrete
actions), `networks.py` (squashed Gaussian actor, Q networks), `loss.py` (the update), `replay.py` (the
buffer), `onnx_head.py` (the actor's ONNX graph, gSDE's exploring one); `discrete/`: the same for Discrete actions."""
