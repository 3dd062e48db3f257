"""Observation and action spaces, the action distributions over them, the ONNX tensor names."""
