"""The tools for drills and development: the fake provider, the fake alert receiver and the
incident drill, with their management commands (`fakeprovider`, `fakereceiver`, `drill`).

No serving module imports this package: a gateway in production runs without it, and only the
commands, the tests and the benchmarks use it.
"""
