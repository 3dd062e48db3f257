"""The sans-I/O RLlink core: frames and bodies in, events out; replies in, bytes out."""
