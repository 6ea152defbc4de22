"""Models: the tiny local model, checkpoint I/O, rollout backends and trainer adapters."""
