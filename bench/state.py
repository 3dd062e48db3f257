"""State: from a new policy version to SET_STATE bytes ready, and the message size.

    python bench/state.py [--iterations 200]

The default policy (CartPole spaces, 64x64 MLP) is built as the learner builds it;
each iteration nudges its weights (a new version), then times what the gateway does
before the first client can be answered: the ONNX graph built from the weights and
serialized, gzip, base64 (`app.training.onnx_export.policy_state`), then the SET_STATE
message and its frame (`app.sansio.protocol.encode_message`, JSON as RLlib's clients read it,
and msgpack). Also timed: the same frame for every further client (what each extra
client costs), and the checkpoint the learner writes before it publishes the version.

Target: new weights to SET_STATE bytes ready < 5 ms (median; p99 shown).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from _common import emit, percentile, rounded  # noqa: E402

from app.sansio.protocol import decode_body, encode_message  # noqa: E402
from app.schemas import SetState  # noqa: E402
from app.settings.config import Settings  # noqa: E402
from app.training.algorithms.ppo.learner import PPOLearner  # noqa: E402
from app.training.algorithms.ppo.onnx_head import export_onnx, policy_state  # noqa: E402
from app.training.onnx_export import load_payload  # noqa: E402
from app.training.policy_state import GZIP_LEVEL  # noqa: E402
from rllink.framing import Encoding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the gateway's learner thread

    with tempfile.TemporaryDirectory(prefix="rllink-bench-") as tmp:
        settings = Settings(checkpoint_dir=Path(tmp) / "checkpoints", _cli_parse_args=False)
        learner = PPOLearner(
            settings.ppo, settings.observation_space, settings.action_space,
            seed=settings.seed, checkpoint_dir=settings.checkpoint_dir, onnx_input_name=settings.onnx_input_name,
        )
        policy, input_name = learner.policy, settings.onnx_input_name
        stages: dict[str, list[float]] = {
            name: []
            for name in (
                "onnx_export", "gzip", "base64", "policy_state", "set_state_json", "set_state_msgpack",
                "total_json", "next_client_json", "checkpoint_save",
            )
        }
        sizes = {}
        for i in range(max(1, args.iterations) + 10):
            with torch.no_grad():  # a new version
                for p in policy.parameters():
                    p.add_(torch.randn_like(p) * 1e-3)
            seq = i + 1
            # The stages one by one ...
            t0 = time.perf_counter()
            onnx_bytes = export_onnx(policy, seq, input_name)
            t1 = time.perf_counter()
            packed = gzip.compress(onnx_bytes, compresslevel=GZIP_LEVEL)
            t2 = time.perf_counter()
            b64 = base64.b64encode(packed).decode("ascii")
            t3 = time.perf_counter()
            # ... and the path the gateway takes, end to end.
            state = policy_state(policy, seq, input_name)
            t4 = time.perf_counter()
            frame = encode_message(SetState(onnx_file=state.onnx_gzip_b64, weights_seq_no=seq), Encoding.JSON)
            t5 = time.perf_counter()
            frame_msgpack = encode_message(SetState(onnx_file=state.onnx_gzip_b64, weights_seq_no=seq), Encoding.MSGPACK)
            t6 = time.perf_counter()
            frame_again = encode_message(SetState(onnx_file=state.onnx_gzip_b64, weights_seq_no=seq), Encoding.JSON)
            t7 = time.perf_counter()
            learner.weights_seq_no = seq
            learner.save()
            t8 = time.perf_counter()
            if i < 10:  # warm-up
                continue
            for name, seconds in (
                ("onnx_export", t1 - t0), ("gzip", t2 - t1), ("base64", t3 - t2), ("policy_state", t4 - t3),
                ("set_state_json", t5 - t4), ("set_state_msgpack", t6 - t5), ("total_json", t5 - t3),
                ("next_client_json", t7 - t6), ("checkpoint_save", t8 - t7),
            ):
                stages[name].append(seconds)
            if not sizes:
                sizes = {
                    "onnx_bytes": len(onnx_bytes), "gzip_bytes": len(packed), "base64_chars": len(b64),
                    "set_state_frame_json_bytes": len(frame), "set_state_frame_msgpack_bytes": len(frame_msgpack),
                }
            assert frame_again == frame
        # The frame is what a client can use.
        message, _ = decode_body(frame[8:])
        model = load_payload(message["onnx_file"])
        assert message["type"] == "SET_STATE" and message["weights_seq_no"] == seq and model.graph.node

    summary = {
        name: {"p50_ms": rounded(percentile(v, 50) * 1e3, 4), "p99_ms": rounded(percentile(v, 99) * 1e3, 4)}
        for name, v in stages.items()
    }
    total = summary["total_json"]
    ok = total["p50_ms"] < 5
    labels = {
        "onnx_export": "ONNX graph from the weights + serialize",
        "gzip": f"gzip (level {GZIP_LEVEL})",
        "base64": "base64",
        "policy_state": "= policy_state() (the three above)",
        "set_state_json": "SET_STATE model + JSON frame",
        "set_state_msgpack": "SET_STATE model + msgpack frame",
        "total_json": "new weights -> SET_STATE JSON bytes",
        "next_client_json": "the same frame for each further client",
        "checkpoint_save": "checkpoint save (learner, before publishing)",
    }
    lines = [f"{'stage':48s}{'p50 ms':>10s}{'p99 ms':>10s}"]
    for name, s in summary.items():
        lines.append(f"{labels[name]:48s}{s['p50_ms']:>10.3f}{s['p99_ms']:>10.3f}")
    lines.append(
        f"sizes: ONNX {sizes['onnx_bytes']:,} B, gzip {sizes['gzip_bytes']:,} B, base64 {sizes['base64_chars']:,} chars, "
        f"SET_STATE frame {sizes['set_state_frame_json_bytes']:,} B (JSON), "
        f"{sizes['set_state_frame_msgpack_bytes']:,} B (msgpack)"
    )
    lines.append(f"target new weights -> SET_STATE bytes < 5 ms: {'met' if ok else 'MISSED'} ({total['p50_ms']:.3f} ms median)")
    emit(
        "state",
        lines,
        {
            "iterations": len(stages["total_json"]),
            "stages": summary,
            "sizes": sizes,
            "hidden_sizes": list(settings.ppo.hidden_sizes),
            "targets": {"new weights to SET_STATE bytes < 5 ms": ok},
        },
    )


if __name__ == "__main__":
    main()
