"""The Python reference clients: gymnasium environments and multi-agent scenes played
over RLlink (TCP or WebSocket) with a downloaded ONNX policy or the gateway acting.
They need the `rllink` wire package only, never the gateway's `app`."""
