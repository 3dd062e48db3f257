"""The gateway SIGKILLed in the middle of training and restarted on the same checkpoint
directory: it comes back at the last version a client received (or the one it was about
to publish), serves the very model of that version, and its checkpoint is never corrupt.
"""

from __future__ import annotations

import time

import numpy as np
import onnxruntime as ort
import pytest
import torch

from app.settings.hyperparameters import DEFAULT_MODULE_ID
from app.training.checkpoints import CHECKPOINT_FILE
from app.training.onnx_export import load_payload
from rllink_clients.rllink_client import RLlinkClient

from .gateway_process import gateway_process
from .helpers import chunk

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # gateways as their own processes, SIGKILLed; ~10 s

BATCH = 64
PROCESS_FLAGS = ("--train-batch-size", str(BATCH), "--barrier-timeout-s", "60")


def onnx_bytes(set_state: dict) -> bytes:
    return load_payload(set_state["onnx_file"]).SerializeToString()


# Seconds between sending a batch and SIGKILL: before its training step ends (the gateway
# comes back at the version the client has), and after (at the one it was about to send).
KILL_DELAYS = (0.0, 0.3)
KILLS = len(KILL_DELAYS)


def test_a_gateway_killed_while_training_resumes_from_its_checkpoint(tmp_path):
    checkpoint_dir, log = tmp_path / "checkpoints", tmp_path / "gateway.log"
    served: dict[int, bytes] = {}  # the ONNX model of every version a client received
    last_received = 0
    for round_ in range(KILLS + 1):
        with gateway_process(checkpoint_dir, log, *PROCESS_FLAGS) as gateway:
            with RLlinkClient("tcp", port=gateway.tcp_port, timeout=60) as client:
                state = client.request({"type": "GET_STATE"})
                restarted = state["weights_seq_no"]
                # The learner checkpoints a version before it is published, so the
                # gateway comes back at least at the last version any client received;
                # with one client in lockstep, at most one step further (killed between
                # saving a version and sending it).
                assert last_received <= restarted <= last_received + 1, (round_, last_received, restarted)
                if restarted in served:
                    assert onnx_bytes(state) == served[restarted]  # the very model served before
                served[restarted] = onnx_bytes(state)
                logits = ort.InferenceSession(served[restarted]).run(None, {"obs": np.zeros((1, 4), np.float32)})[0]
                assert logits.shape == (1, 2) and np.isfinite(logits).all()

                assert client.request({"type": "GET_CONFIG"})["type"] == "SET_CONFIG"
                last_received = restarted
                for _ in range(3):  # each message fills a batch: one training step, one version
                    reply = client.request({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(BATCH)]})
                    assert reply["weights_seq_no"] == last_received + 1
                    last_received = reply["weights_seq_no"]
                    served[last_received] = onnx_bytes(reply)
                if round_ == KILLS:
                    break
                # One more batch, and the gateway dies around its training step.
                client.send({"type": "EPISODES_AND_GET_STATE", "episodes": [chunk(BATCH)]})
                time.sleep(KILL_DELAYS[round_])
                gateway.kill()
        # Never half a checkpoint: it loads, and holds one of the two possible versions.
        saved = torch.load(checkpoint_dir / DEFAULT_MODULE_ID / CHECKPOINT_FILE, weights_only=True)["weights_seq_no"]
        assert saved in (last_received, last_received + 1)
