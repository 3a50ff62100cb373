"""OpenAI's front doors: `POST /v1/chat/completions` (chat.py, its request in chat_request.py,
chat_messages.py and chat_tools.py, its answers in shapes.py), `POST /v1/responses`
(responses.py and its responses_*.py) and `POST /v1/embeddings` (embeddings.py), each reading
its body into the request the cascade routes and answering in OpenAI's shapes, its errors in
OpenAI's error shape (errors.py)."""
