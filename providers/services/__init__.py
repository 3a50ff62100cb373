"""Writes to the control plane, one keyword-only function each, under `transaction.atomic`.

Views, admin pages, control-room actions and management commands call these. Every one leaves a
`ConfigChange` in the same transaction (`audit`), and its side effects (the config version, a
breaker in the shared state) happen once the transaction has committed, so the record and the
effect can't disagree.
"""
