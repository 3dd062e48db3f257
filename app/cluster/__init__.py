"""Scale-out on Ray (the optional extra `rllink-gateway[ray]`): one learner actor, many front-ends.

- `learner_actor.py`: the training service (scheduler, learners, checkpoints) in one actor.
- `remote_service.py`: a front-end's stand-in for that service: it batches experience to the
  learner and follows its versions, so the gateway's transports and REST work unchanged.
- `frontend_actor.py`: a whole gateway front (TCP, HTTP, WebSocket) in an actor.
- `calls.py`: how a front-end numbers its calls, so that the learner runs them in order.
- `launch.py`: `python -m app --ray-address ... --frontends N` places them on the cluster.
"""
