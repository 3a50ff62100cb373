"""The health sentinel's active checks and the warm keepalive: background jobs the runtime's
schedulers run, never on a request's path."""
