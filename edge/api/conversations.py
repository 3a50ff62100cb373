"""What every door's reading of a conversation shares: a system message keeps its place once
the conversation has begun (a dialect that takes one system prompt only joins them into it, in
order: `gateway/adapters/tools.py`), and a plain conversation (no tools, no images) becomes the
question and the turns before it."""

from __future__ import annotations

from gateway.adapters.messages import Turn


def spoken(turns: list[Turn]) -> list[Turn]:
    """The turns that aren't system messages: the last of them is the question or a tool's
    result."""
    return [turn for turn in turns if turn.role != "system"]


def history_of(turns: list[Turn]) -> tuple[tuple[str, str], ...]:
    """A plain conversation's turns before its question, as (role, text), a system message
    after the question placed just before it (the question goes last); an earlier answer's
    thinking has nowhere to go here (only a conversation of turns carries it)."""
    last = max(at for at, turn in enumerate(turns) if turn.role == "user")
    before = [*turns[:last], *turns[last + 1 :]]
    return tuple((t.role, t.text) for t in before if t.text or not t.thoughts)
