"""Crash fuzzer of app/sansio/_columns.c: mutated EPISODES bodies into `parse`, under AddressSanitizer.

The C parser reads untrusted bytes. tests/test_chunk_columns.py checks that what it accepts
agrees with the Python path; this checks that no input makes it read or write out of
bounds, overflow, or crash, whatever it answers. Run by tests/test_fuzz.py, which builds the
extension with `-fsanitize=address,undefined` into a folder and runs this script with that
folder first on sys.path and libasan preloaded; by hand, for longer:

    python tests/fuzz_columns.py BUILD_DIR --iterations 1000000 --seed 7

Exit 0: every input parsed or declined (None); a sanitizer report or a crash ends the
process with its own non-zero status and the report on stderr.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.sansio.chunk_columns import _SCALAR_DEFAULTS  # noqa: E402  (what chunk_columns passes to parse)

# Pieces of JSON that the mutations splice in: the parser's edge cases (numbers at the limits
# of float32, int64 and double, escapes, deep nesting, truncated tokens, the keys it knows).
TOKENS = [
    b"[", b"]", b"{", b"}", b",", b":", b'"', b"\\", b"-", b"+", b".", b"e", b"E", b"0", b"9", b" ", b"\n",
    b"1e400", b"-1e-400", b"3.4028235e38", b"3.5e38", b"9223372036854775807", b"9223372036854775808",
    b"-9223372036854775809", b"1" * 40, b"0." + b"0" * 400 + b"1", b"NaN", b"Infinity", b"null", b"true", b"false",
    b'"\\u0000"', b'"\\ud800"', b'"\\uZZZZ"', b"\xff", b"\xc3", b"[" * 64, b"]" * 64, b"[[]]", b"[[1,2],[3]]",
    b'"obs"', b'"actions"', b'"rewards"', b'"action_logp"', b'"action_dist_inputs"', b'"agent_id"', b'"module_id"',
    b'"episode_id"', b'"weights_seq_no"', b'"outcome"', b'"is_terminated"', b'"is_truncated"', b'"evaluation"',
    b'"episodes"', b'"type"', b'"win"',
]  # fmt: skip


def seed_bodies(rng: random.Random) -> list[bytes]:
    """Valid EPISODES bodies of several chunks of one shape, as a scene's client sends them."""
    bodies = []
    for chunks, steps, width, discrete in ((2, 3, 4, True), (8, 5, 3, False), (4, 1, 2, True), (3, 7, 1, False)):
        episodes = []
        for index in range(chunks):
            chunk = {
                "obs": [[rng.uniform(-3, 3) for _ in range(width)] for _ in range(steps + 1)],
                "actions": [rng.randrange(2) if discrete else [rng.uniform(-2, 2)] for _ in range(steps)],
                "rewards": [rng.choice([1.0, -0.5, 0, 2]) for _ in range(steps)],
                "action_logp": [-rng.random() for _ in range(steps)],
                "agent_id": f"cart_{index}", "episode_id": f"ep{index}", "weights_seq_no": index,
                "is_terminated": index == 0, "is_truncated": False,
            }  # fmt: skip
            if index == 1:
                chunk["outcome"] = "win"
            if not discrete:
                chunk["action_dist_inputs"] = [[0.1, -0.2] for _ in range(steps)]
            episodes.append(chunk)
        bodies.append(json.dumps({"type": "EPISODES", "episodes": episodes}, separators=(",", ":")).encode())
    return bodies


def mutate(body: bytes, rng: random.Random) -> bytes:
    """One to four random edits: a byte changed, a token spliced in, a range cut or repeated, a truncation."""
    data = bytearray(body)
    for _ in range(rng.randint(1, 4)):
        if not data:
            data += rng.choice(TOKENS)
            continue
        at = rng.randrange(len(data))
        kind = rng.randrange(6)
        if kind == 0:
            data[at] = rng.randrange(256)
        elif kind == 1:
            data[at:at] = rng.choice(TOKENS)
        elif kind == 2:
            del data[at : at + rng.randint(1, 16)]
        elif kind == 3:
            end = min(len(data), at + rng.randint(1, 64))
            data[at:at] = data[at:end] * rng.randint(1, 8)
        elif kind == 4:
            del data[at:]
        else:
            token = rng.choice(TOKENS)
            data[at : at + len(token)] = token
    return bytes(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dir", help="the folder holding the sanitized _columns extension")
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.path.insert(0, args.build_dir)
    import _columns  # the sanitized build, not app.sansio's

    rng = random.Random(args.seed)
    bodies = seed_bodies(rng)
    accepted = sum(_columns.parse(body, _SCALAR_DEFAULTS) is not None for body in bodies)
    assert accepted == len(bodies), f"the fuzzer's seed bodies should parse: {accepted} of {len(bodies)}"
    parsed = 0
    for _ in range(args.iterations):
        body = mutate(rng.choice(bodies), rng)
        parsed += _columns.parse(body, _SCALAR_DEFAULTS) is not None
        _columns.number(body[: rng.randint(0, 48)])
    print(f"{args.iterations} mutated bodies: {parsed} parsed, the rest declined; no crash")
    return 0


if __name__ == "__main__":
    sys.exit(main())
