"""The shared state every serving process routes on: the contract (`contract`) and its stores,
in this process's memory (embedded) or in Redis behind a local fallback (production)."""
