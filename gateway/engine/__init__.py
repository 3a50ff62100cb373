"""The engine's pure decisions: the breaker, the health verdict, the budget gate, the snapshot's
types, static-answer matching and the clock. Plain Python over plain data, no Django, no I/O
(docs/architecture.md, "Layers"; tests/failover_site/test_layers.py keeps it so)."""
