"""The RLlink wire format, for gateways and clients alike: frames, bodies, error codes,
and the action distributions a policy's outputs are sampled from. No I/O, no server."""
