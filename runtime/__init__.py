"""The serving process: what builds the gateway, keeps its configuration snapshot current, runs
the background jobs, and hands each routed request's outcome to the ledger and the alerts. It
wires the layers; none of them imports it but the edges (docs/architecture.md, "Layers")."""
