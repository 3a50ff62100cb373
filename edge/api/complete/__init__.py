"""The gateway's own front door, `POST /api/v1/complete` (endpoint.py): a prompt in, the answer
and which tier gave it out, its body read by request.py."""
