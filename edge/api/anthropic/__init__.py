"""Anthropic's front door: `POST /v1/messages` and `/v1/messages/count_tokens` (messages.py),
its request (request.py: the conversation in conversation.py, tools in tools.py, thinking and
output settings in thinking.py), its answers, stream events and error shape (shapes.py) and
their JSON Schemas (schemas.py)."""
