"""The frontends' endpoints: `/api/v1/*` (the platform's own JSON) and `/v1/*` (OpenAI-compatible),
with their request validation."""
