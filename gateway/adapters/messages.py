"""What crosses the adapter contract: the request, the answer, a health check's result, and the
token counting every dialect shares."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gateway.adapters.errors import ErrorClass


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the model asked for: the tool's name and its arguments as JSON text (OpenAI's
    form; the dialects that carry an object are translated both ways)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a streamed tool call, as OpenAI streams them: the first piece of call
    `index` names it (`id`, `name`), the next ones add to its `arguments` text."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""


@dataclass(frozen=True, slots=True)
class Reasoning:
    """A piece of a model's thinking before its answer (Ollama's `thinking`), given to
    clients as `reasoning_content`; never the answer's first token."""

    text: str


# A piece of a streamed answer: its text, a piece of a tool call, or of the model's thinking.
Piece = str | ToolCallDelta | Reasoning

# The effort words a request's thinking is read into, lowest first (each dialect's own words
# are mapped onto these: OpenAI's minimal / xhigh, Anthropic's budgets, Ollama's levels).
EFFORTS = ("minimal", "low", "medium", "high", "max")
# Thinking budgets, in tokens, that stand for each effort where a dialect takes a budget
# (Anthropic's budget_tokens), and the efforts a budget stands for where it takes a word.
EFFORT_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "max": 32000}


def effort_of_budget(budget: int) -> str:
    """The effort word a thinking budget stands for: the highest whose budget it reaches."""
    return next(
        (effort for effort in reversed(EFFORTS) if budget >= EFFORT_BUDGETS[effort]), "minimal"
    )


@dataclass(frozen=True, slots=True)
class Thinking:
    """What the caller asked of the model's thinking before its answer, in no dialect's words:
    on or off, and how much (an effort word of `EFFORTS`, a token budget, or `adaptive`: the
    model decides). Each adapter asks its API in its own words, and only a provider whose
    settings say its model thinks is asked; elsewhere the request's thinking is dropped."""

    on: bool
    effort: str = ""  # "" when the caller named none
    budget: int | None = None  # tokens, when the caller gave a budget
    adaptive: bool = False

    @property
    def level(self) -> str:
        """The effort asked for, or the one its budget stands for ("medium" when neither)."""
        if self.effort:
            return self.effort
        return effort_of_budget(self.budget) if self.budget is not None else "medium"


def thinking_of_effort(effort: str) -> Thinking:
    """OpenAI's reasoning effort as a request's thinking: "none" is off; "xhigh" is the most,
    as Anthropic's "max" is."""
    if effort == "none":
        return Thinking(on=False)
    return Thinking(on=True, effort={"xhigh": "max"}.get(effort, effort))


# A thinking text's signature, when the gateway wrote it for a provider kind other than
# Anthropic (whose own signatures are opaque and kept as they came): it names the kind, so
# the conversation's next request gives that thinking back to the same kind only.
OWN_SIGNATURE = "failover-thinking:"


def signed_by(dialect: str) -> str:
    """The signature the gateway gives thinking that a provider of `dialect` wrote."""
    return OWN_SIGNATURE + dialect


@dataclass(frozen=True, slots=True)
class Thought:
    """An earlier answer's thinking, as a conversation carries it back: its text and who wrote
    it (`dialect`), with Anthropic's signature (or its redacted data) when Anthropic did. It is
    given back only to a provider of the dialect that wrote it, never forged for another."""

    text: str
    dialect: str
    signature: str = ""
    redacted: str = ""  # Anthropic's redacted_thinking data

    @classmethod
    def signed(cls, text: str, signature: str) -> Thought:
        """A thinking block as a client sent it back: the gateway's own signature names the
        dialect; any other is Anthropic's."""
        if signature.startswith(OWN_SIGNATURE):
            return cls(text, signature[len(OWN_SIGNATURE) :])
        return cls(text, "anthropic", signature)


@dataclass(frozen=True, slots=True)
class Image:
    """An image in a conversation: its bytes as base64 (`data`, of `media_type`), or where it
    is (`url`, http or https) for a provider that fetches it."""

    media_type: str = ""
    data: str = ""
    url: str = ""

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}" if self.data else self.url


# The image types every provider kind here reads.
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


# What an image counts for in a context window: a provider's own count runs from a few hundred
# tokens (a small image) to about 1,600 (Anthropic's largest before it scales an image down).
IMAGE_TOKENS = 1600


@dataclass(frozen=True, slots=True)
class Turn:
    """One message of a conversation that uses tools: a user's or assistant's text, an
    assistant's tool calls, or a tool's result (`tool_call_id`, the call it answers, and
    `name`, that call's tool)."""

    role: str  # system / user / assistant / tool
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    thoughts: tuple[Thought, ...] = ()  # an assistant's thinking before its text and calls
    images: tuple[Image, ...] = ()  # a user's images, or a tool result's


@dataclass(frozen=True, slots=True)
class Tool:
    """A function the model may call: its JSON Schema `parameters` (None: takes none)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


@dataclass(frozen=True, slots=True)
class OutputFormat:
    """Structured output: any JSON object (`json_object`), or one matching `schema`
    (`json_schema`, named `name`)."""

    kind: str  # json_object / json_schema
    name: str = ""
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    """What to ask: the question (`prompt`, the last user message), the system prompt, the
    conversation before the question as (role, text) turns, and the sampling parameters.

    A conversation that uses tools is `turns` instead, the whole of it after the system prompt
    (its last message may be a tool's result); `prompt` is then its last user text. `options`
    are the other parameters the caller sent, each passed on or refused by the dialect's table
    (`gateway/adapters/params.py`)."""

    prompt: str
    system_prompt: str = ""
    max_tokens: int | None = None
    temperature: float | None = None
    history: tuple[tuple[str, str], ...] = ()  # ("user" | "assistant", text), oldest first
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    turns: tuple[Turn, ...] = ()
    tools: tuple[Tool, ...] = ()
    tool_choice: str = ""  # "" (not sent) / auto / none / required / a tool's name
    output: OutputFormat | None = None
    options: tuple[tuple[str, Any], ...] = ()  # (name, value), in the table's order
    model: str = ""  # the upstream model to ask ("": the provider's own), set by an alias
    # An embedding request: the texts to embed (`prompt` is them joined, for the estimates),
    # and the vectors' length when the caller asks for one.
    embed: tuple[str, ...] = ()
    dimensions: int | None = None
    thinking: Thinking | None = None  # None: the caller said nothing of thinking

    @property
    def uses_tools(self) -> bool:
        """Whether an answer may be a tool call, or the conversation holds one: only a
        provider that speaks tools can carry it, and no fallback text can stand in for it."""
        return bool(self.tools) or any(
            turn.tool_calls or turn.role == "tool" for turn in self.turns
        )

    @property
    def images(self) -> int:
        """How many images the conversation holds."""
        return sum(len(turn.images) for turn in self.turns) if self.turns else 0

    def option(self, name: str, default: Any = None) -> Any:
        return next((value for key, value in self.options if key == name), default)

    def messages(self, *, with_system: bool = True) -> list[dict[str, Any]]:
        """The conversation in OpenAI's message shape."""
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": self.system_prompt}]
            if self.system_prompt and with_system
            else []
        )
        if self.turns:
            for turn in self.turns:
                messages += _openai_messages(turn)
            return messages
        messages += [{"role": role, "content": text} for role, text in self.history]
        messages.append({"role": "user", "content": self.prompt})
        return messages

    def all_text(self) -> str:
        if self.turns:
            texts = [self.system_prompt]
            for turn in self.turns:
                texts.append(turn.text)
                texts += [f"{call.name} {call.arguments}" for call in turn.tool_calls]
            texts += [f"{tool.name} {tool.description} {tool.parameters}" for tool in self.tools]
            return "\n".join(texts)
        return "\n".join((self.system_prompt, *(text for _, text in self.history), self.prompt))


def _image_parts(images: tuple[Image, ...]) -> list[dict[str, Any]]:
    return [{"type": "image_url", "image_url": {"url": image.data_url}} for image in images]


def _openai_messages(turn: Turn) -> list[dict[str, Any]]:
    """A turn as OpenAI's messages: one, and a tool result's images as a user message after
    it (a tool message holds text only)."""
    if turn.role == "system":
        return [{"role": "system", "content": turn.text}]
    if turn.role == "tool":
        message = {"role": "tool", "tool_call_id": turn.tool_call_id, "content": turn.text}
        if not turn.images:
            return [message]
        shown = {"type": "text", "text": f"The images of the tool result {turn.tool_call_id}:"}
        return [message, {"role": "user", "content": [shown, *_image_parts(turn.images)]}]
    if turn.images:
        text = [{"type": "text", "text": turn.text}] if turn.text else []
        return [{"role": turn.role, "content": [*text, *_image_parts(turn.images)]}]
    return [_openai_message(turn)]


def _openai_message(turn: Turn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": turn.role, "content": turn.text}
    if turn.tool_calls:
        message["content"] = turn.text or None
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in turn.tool_calls
        ]
    return message


@dataclass(frozen=True, slots=True)
class Completion:
    text: str
    provider: str
    tokens_in: int
    tokens_out: int
    latency_ms: float
    finish_reason: str = ""  # the provider's own word: stop, length, max_tokens, end_turn …
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str = ""  # the model's thinking before its answer, when it gave it
    # Who wrote the thinking, as a conversation carries it back (`Thought.signed`):
    # Anthropic's signature, or the gateway's `signed_by` the provider's dialect.
    reasoning_signature: str = ""
    tokens_estimated: bool = False  # the counts are the gateway's estimate, not the provider's
    embeddings: tuple[tuple[float, ...], ...] = ()  # an embedding request's vectors, in order
    # Of its latency, the time the provider spent loading the model first (Ollama's
    # load_duration): a model loading isn't a slow provider.
    load_s: float = 0.0


class HealthLevel(StrEnum):
    """How deep a health check goes, in order: each level is checked only once the one before
    has passed."""

    REACHABLE = "reachable"  # the model list answers (and, for a keyed API, takes the key)
    MODEL = "model"  # the configured model is in it
    INFERENCE = "inference"  # a one-token completion answers


@dataclass(frozen=True, slots=True)
class HealthResult:
    """One health check. `level` is the level that failed, or the deepest one that passed."""

    ok: bool
    latency_ms: float
    detail: str = ""
    error_class: ErrorClass | None = None
    level: HealthLevel | None = None
    # The model is loading (a self-hosted server answers, the model isn't in memory yet and
    # the one-token answer is still on its way): a good result, with a verdict of its own.
    loading: bool = False


# The inference level's question: one token of answer is all it needs to see.
HEALTH_PROBE = CompletionRequest(prompt="Reply with one word: ok", max_tokens=1)


def estimate_tokens(text: str) -> int:
    """A provider-independent estimate (about four characters a token) for budgets."""
    return max(1, len(text) // 4)


def prompt_needed(request: CompletionRequest) -> int:
    """The tokens of a provider's context window the prompt takes, estimated: about four
    characters a token, plus each message's framing. An embedding request's inputs are each
    embedded on their own: its need is its longest input's."""
    if request.embed:
        return max(estimate_tokens(text) for text in request.embed)
    turns = len(request.turns) or len(request.history) + 1
    return estimate_tokens(request.all_text()) + 4 * turns + IMAGE_TOKENS * request.images


def context_needed(request: CompletionRequest) -> int:
    """The tokens a call needs of a provider's context window: the prompt's and the longest
    answer asked for (as OpenAI counts it: a prompt and a max_tokens over the window are
    refused)."""
    return prompt_needed(request) + (request.max_tokens or 0)


# No real answer has more; a bigger count is nonsense that would not fit the ledger's column.
MAX_TOKEN_COUNT = 2**31 - 1


def token_count(value: object) -> int:
    """A token count from an upstream body, or 0 when it's missing or nonsense."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return 0
