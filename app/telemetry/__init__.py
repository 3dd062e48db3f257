"""Counters and recorders with no knowledge of the rest: traffic, the metrics history,
TensorBoard event files."""
