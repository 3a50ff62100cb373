"""The edge: every HTTP endpoint a frontend, an SDK, a probe or a scraper calls (`/api/v1/*`,
the OpenAI-compatible `/v1/*`, the probes, `/metrics`, the front door and the API reference),
and the lean ASGI path the API requests take to them."""
