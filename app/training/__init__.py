"""Training for the gateway: client registry, batch scheduler, learner, policy store (service.py joins them)."""
