"""Every pending GET_ACTION of every connection through the policy in one forward pass.

Requests wait at most `max_wait_s` (0: only those read in the same turn of the event
loop share a pass) or until `max_batch` observations are pending. Each module's
current ONNX model runs with onnxruntime on the event loop: an MLP on a few thousand
observations takes well under a millisecond, less than a hop to a thread would cost.
The actions of a whole pass are sampled at once too (clients/python/rllink/action_dists.py), and so are
the log-probs of actions clients chose themselves (LOG_ACTION). The session of a
published version is built once, when a request first needs it. A recurrent module's
requests bring their episodes' states (state_in) and take back the states after (state_out).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from app.settings.policies import Module
from app.spaces.models import ActionSpace, BoxSpace, MultiDiscreteSpace
from app.spaces.onnx_names import ACTION_MASK_INPUT, OUTPUT_NAME, STATE_INPUT, STATE_OUTPUT
from app.training.policy_state import PolicyState
from app.training.policy_store import PolicySetState
from rllink.action_dists import actions_logp, sample_actions


@dataclass
class Actions:
    """One request's share of a pass: an action per observation (sampled, or the one given)
    with its log-prob, and the version that chose them."""

    actions: np.ndarray  # [n] int64 (Discrete) or [n, *shape] float (Box, unclipped)
    logp: np.ndarray  # [n]
    weights_seq_no: int
    state_out: np.ndarray | None = None  # [n, state_size]: a recurrent model's state after each step


@dataclass
class _Pending:
    module: Module
    obs: np.ndarray  # [n, *obs_shape] float32
    explore: np.ndarray  # [n] bool
    mask: np.ndarray | None  # [n, k] float32 action masks (a module with action_masking)
    given: np.ndarray | None  # actions the client chose (LOG_ACTION): their log-probs, no sampling
    state: np.ndarray | None  # [n, state_size] a recurrent model's state_in
    future: asyncio.Future[Actions]
    noise: np.ndarray | None = None  # [n, d] a Box's N(0, 1) draws, pink ones; None: white


class _Runner:
    """onnxruntime's session of one module's published model (and of a gSDE actor's exploring
    model, which exploring steps play, as a client running the SET_STATE model would)."""

    def __init__(self, state: PolicyState) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # the learner has the other core
        self.state = state
        self.session = ort.InferenceSession(state.onnx_bytes, options, providers=["CPUExecutionProvider"])
        self.exploring = None
        if state.exploring_onnx_bytes is not None:
            self.exploring = ort.InferenceSession(state.exploring_onnx_bytes, options, providers=["CPUExecutionProvider"])
        self.obs_name = self.session.get_inputs()[0].name
        self.recurrent = any(model_input.name == STATE_INPUT for model_input in self.session.get_inputs())
        # named: onnxruntime then skips listing them per run
        self.output_names = [self.session.get_outputs()[0].name, *([STATE_OUTPUT] if self.recurrent else [])]

    def run(self, obs: np.ndarray, mask: np.ndarray | None, state: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """action_dist_inputs (float64), and a recurrent model's state_out."""
        feed = {self.obs_name: obs}
        if mask is not None:
            feed[ACTION_MASK_INPUT] = mask
        if self.recurrent:
            feed[STATE_INPUT] = state
        outputs = self.session.run(self.output_names, feed)
        return outputs[0].astype(np.float64), outputs[1] if self.recurrent else None

    def explored(self, dist_inputs: np.ndarray, obs: np.ndarray, explore: np.ndarray) -> np.ndarray:
        """`dist_inputs` (changed in place) with the exploring rows' from the exploring model, if
        there is one (gSDE: this version's noise in the mean, consistent from step to step, not
        white noise); the other rows, the mode's and LOG_ACTION's, stay the policy's."""
        if self.exploring is None or not explore.any():
            return dist_inputs
        (exploring,) = self.exploring.run([OUTPUT_NAME], {self.obs_name: obs[explore]})
        dist_inputs[explore] = exploring
        return dist_inputs


class ActionBatcher:
    """Collects observations from every connection and runs them through the policy together."""

    def __init__(
        self,
        current_state: Callable[[], PolicySetState],
        *,
        max_batch: int,
        max_wait_s: float,
        rng: np.random.Generator,
        on_pass: Callable[[int], None] | None = None,
    ) -> None:
        self._current_state = current_state
        self._rng = rng
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._on_pass = on_pass  # (observations in the pass) for the metrics
        self._pending: deque[_Pending] = deque()
        self._pending_rows = 0
        self._flush: asyncio.Handle | None = None
        self._runners: dict[str, _Runner] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the gateway's, from the first request

    # act, log_prob and _queue return the future itself, not a coroutine awaiting it: each
    # level of coroutines is crossed twice per request (suspending, resuming).

    def act(
        self,
        module: Module,
        obs: np.ndarray,
        explore: np.ndarray,
        mask: np.ndarray | None = None,
        state: np.ndarray | None = None,
        noise: np.ndarray | None = None,
    ) -> asyncio.Future[Actions]:
        """An action for each observation of `obs` [n, *obs_shape] under `module`'s current
        model: sampled, or the most likely one (the mean) where `explore` [n] is False;
        never one `mask` [n, k] forbids (given for a module with action_masking, else None);
        `state` [n, state_size]: a recurrent module's state_in (its state_out comes back);
        `noise` [n, d]: a Box's N(0, 1) draws (pink ones) instead of white."""
        return self._queue(module, obs, explore, mask, None, state, noise)

    def log_prob(
        self, module: Module, obs: np.ndarray, actions: np.ndarray, mask: np.ndarray | None = None, state: np.ndarray | None = None
    ) -> asyncio.Future[Actions]:
        """The log-probs of actions the client chose itself, under the current model."""
        return self._queue(module, obs, np.zeros(len(obs), bool), mask, actions, state)

    def _queue(
        self, module: Module, obs: np.ndarray, explore: np.ndarray, mask: np.ndarray | None, given: np.ndarray | None,
        state: np.ndarray | None, noise: np.ndarray | None = None,
    ) -> asyncio.Future[Actions]:
        if self._loop is None:  # noted once: get_running_loop() makes a getpid() system call each time
            self._loop = asyncio.get_running_loop()
        future = self._loop.create_future()
        self._pending.append(_Pending(module, obs, explore, mask, given, state, future, noise))
        self._pending_rows += len(obs)
        if self._pending_rows >= self.max_batch:
            self._run_pending()
        elif self._flush is None:
            loop = self._loop
            self._flush = loop.call_soon(self._run_pending) if self.max_wait_s == 0 else loop.call_later(
                self.max_wait_s, self._run_pending
            )
        return future

    def _run_pending(self) -> None:
        """One pass per module over what is pending (at most max_batch observations; the rest waits its turn)."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        taken, rows = [], 0
        while self._pending and (not taken or rows + len(self._pending[0].obs) <= self.max_batch):
            rows += len(self._pending[0].obs)
            taken.append(self._pending.popleft())
        self._pending_rows -= rows
        if self._pending:
            self._flush = self._loop.call_soon(self._run_pending)
        published = self._current_state()
        by_module: dict[str, list[_Pending]] = {}
        for request in taken:
            by_module.setdefault(request.module.module_id, []).append(request)
        for module_id, requests in by_module.items():
            try:
                module = requests[0].module
                runner, obs = self._runner(module_id, published.modules[module_id]), _joined([request.obs for request in requests])
                dist_inputs, state_out = runner.run(
                    obs,
                    _joined([request.mask for request in requests]) if module.action_masking else None,
                    None if requests[0].state is None else _joined([request.state for request in requests]),
                )
                explore = _joined([request.explore for request in requests])
                actions, logp = self._sample(module, runner.explored(dist_inputs, obs, explore), explore, _noise(requests))
            except Exception as exc:  # a bug of ours: those requests fail, the next pass runs
                for request in requests:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            start = 0
            for request in requests:
                part = slice(start, start + len(request.obs))
                start = part.stop
                if request.future.done():  # the client has gone
                    continue
                states = None if state_out is None else state_out[part]
                if request.given is None:
                    result = Actions(actions[part], logp[part], published.weights_seq_no, states)
                else:
                    logged = self._log_prob(module, dist_inputs[part], request.given)
                    result = Actions(request.given, logged, published.weights_seq_no, states)
                request.future.set_result(result)
        if self._on_pass is not None:
            self._on_pass(rows)

    def _sample(
        self, module: Module, dist_inputs: np.ndarray, explore: np.ndarray, noise: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Actions from the model's (already masked) outputs, shaped as the space's."""
        space = module.action_space
        actions, logp = sample_actions(module.action_distribution, dist_inputs, self._rng, explore, noise=noise, **_parameters(space))
        if isinstance(space, BoxSpace):
            actions = actions.reshape(len(actions), *space.shape)
        return actions, logp

    @staticmethod
    def _log_prob(module: Module, dist_inputs: np.ndarray, actions: np.ndarray) -> np.ndarray:
        space = module.action_space
        if isinstance(space, BoxSpace):
            actions = actions.reshape(len(actions), -1)
        return actions_logp(module.action_distribution, dist_inputs, actions, **_parameters(space))

    def _runner(self, module_id: str, state: PolicyState) -> _Runner:
        runner = self._runners.get(module_id)
        if runner is None or runner.state is not state:
            runner = self._runners[module_id] = _Runner(state)
        return runner


def _joined(arrays: list[np.ndarray]) -> np.ndarray:
    """The requests' rows one after the other (a lone request's own array: no copy)."""
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _noise(requests: list[_Pending]) -> np.ndarray | None:
    """The requests' pink noise draws [rows, d] (zeros for a LOG_ACTION's rows, which do not
    sample), or None where none brings any: white noise."""
    given = next((request.noise for request in requests if request.noise is not None), None)
    if given is None:
        return None
    return _joined([np.zeros((len(r.obs), given.shape[1])) if r.noise is None else r.noise for r in requests])


def _parameters(space: ActionSpace) -> dict:
    """What the space's action distribution needs besides its inputs: a box's bounds, a MultiDiscrete's nvec."""
    if isinstance(space, BoxSpace):
        return {"low": space.low, "high": space.high}
    if isinstance(space, MultiDiscreteSpace):
        return {"nvec": space.nvec}
    return {}
