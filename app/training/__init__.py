"""Training for the gateway: client registry, batch scheduler, learners, policy store (service.py joins
them); each algorithm a package of algorithms/."""
