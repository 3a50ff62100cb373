"""The gateway library: the failover engine's pure decisions (`engine`), the shared state every
serving process routes on (`state`), the provider adapters (`adapters`), one request's walk down
the cascade (`routing`) and the health sentinel (`sentinel`).

Plain Python over plain values: no module here imports Django, and what the deployment chose
(the outbound policy, the HTTP client, where secrets may go) is handed in as values by the
runtime (docs/architecture.md, "Layers").
"""
