"""Server-side inference for thin clients: the gateway acts for them and builds their episodes."""
