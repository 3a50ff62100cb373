"""The project's own packages, as the architecture, documentation and command tests read them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The Django apps of the control plane and composition, then the packages of the other concerns.
PACKAGES = (
    "failover_site", "providers", "billing", "alerts",
    "gateway", "edge", "control_room", "runtime", "devtools",
)  # fmt: skip
