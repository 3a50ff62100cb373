"""The `disobey` fault: answers that ignore what the request required, as a careless model's
do, for the gateway's compliance checks (`gateway/routing/compliance.py`)."""

from __future__ import annotations

import json

from devtools.fake_provider.config import FakeConfig
from devtools.fake_provider.dialects import Reply
from devtools.fake_provider.tools import Plan, ToolCall

# A tool no request offers, for the "unknown_tool" fault.
UNOFFERED_TOOL = "unoffered_tool"


def disobeyed(planned: Plan, config: FakeConfig) -> Plan:
    """The planned answer as the fault twists it: a tool call or a JSON text (what a request
    with tools or JSON output is answered with) becomes plain text ("text"), a call to a tool
    nobody offered ("unknown_tool"), or JSON, a call's arguments included, off every schema
    ("off_schema"). A 400 and an ordinary answer stay as they are."""
    if not config.disobey or planned is None or isinstance(planned, Reply):
        return planned
    if config.disobey == "text":
        return config.full_answer
    if config.disobey == "unknown_tool":
        return ToolCall(UNOFFERED_TOOL, {})
    if isinstance(planned, ToolCall):  # the right tool, with arguments off its schema
        return ToolCall(planned.name, {"unexpected": True})
    return json.dumps({"unexpected": True})
