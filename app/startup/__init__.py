"""Start-up: command-line flags, binding the ports, running uvicorn on the gateway."""
