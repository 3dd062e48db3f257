"""Settings and what follows from them alone: hyperparameters, the modules (policies), the
run folder, logging with tokens redacted."""
