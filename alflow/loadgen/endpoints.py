"""OpenAI-compatible endpoints: request bodies and how to read output from a stream event.

A ``Protocol`` plus a plain dict is the whole registry (:data:`ENDPOINTS`). Every body asks for a
stream with ``stream_options.include_usage`` so token counts come from the server's usage, and
always sends ``max_tokens`` (servers default to 16 when it is omitted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from alflow.datasets.types import Turn
from alflow.errors import InvalidInputError


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling options sent with every request; a turn's own length settings take precedence."""

    max_tokens: int = 256
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_tokens: int | None = None
    ignore_eos: bool | None = None
    seed: int | None = None
    chat_template_kwargs: Mapping[str, Any] | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def fields(self, turn: Turn) -> dict[str, Any]:
        """The body fields for ``turn`` (None values are left out)."""
        body: dict[str, Any] = {
            "max_tokens": turn.max_tokens if turn.max_tokens is not None else self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_tokens": turn.min_tokens if turn.min_tokens is not None else self.min_tokens,
            "ignore_eos": turn.ignore_eos if turn.ignore_eos is not None else self.ignore_eos,
            "seed": self.seed,
        }
        return {**{k: v for k, v in body.items() if v is not None}, **self.extra_body}


class Endpoint(Protocol):
    """One OpenAI-compatible streaming endpoint."""

    name: str
    path: str

    def body(
        self, model: str, history: Sequence[Mapping[str, str]], turn: Turn, sampling: Sampling
    ) -> dict[str, Any]:
        """The JSON body for ``turn`` after ``history`` (earlier messages of the session)."""
        ...

    def output(self, event: dict[str, Any]) -> tuple[str | None, bool]:
        """From one stream event: (reply text to keep, whether the event carried output tokens)."""
        ...


_STREAM: Final = {"stream": True, "stream_options": {"include_usage": True}}


class ChatEndpoint:
    """``/v1/chat/completions``: the server applies the chat template; reasoning counts as output."""

    name = "chat"
    path = "/v1/chat/completions"

    def body(
        self, model: str, history: Sequence[Mapping[str, str]], turn: Turn, sampling: Sampling
    ) -> dict[str, Any]:
        if not isinstance(turn.prompt, str):
            raise InvalidInputError(
                "the chat endpoint needs text prompts; token-id prompts go to --endpoint completions "
                "(or detokenize them first)"
            )
        messages = [*history, {"role": "user", "content": turn.prompt}]
        body: dict[str, Any] = {"model": model, "messages": messages, **_STREAM, **sampling.fields(turn)}
        if sampling.chat_template_kwargs:
            body["chat_template_kwargs"] = dict(sampling.chat_template_kwargs)
        return body

    def output(self, event: dict[str, Any]) -> tuple[str | None, bool]:
        choices = event.get("choices")
        if not choices:
            return None, False
        delta = choices[0].get("delta")
        if not delta:
            return None, False
        content = delta.get("content")
        return content, bool(content or delta.get("reasoning_content") or delta.get("reasoning"))


class CompletionsEndpoint:
    """``/v1/completions``: raw prompts, text or token ids; no chat template."""

    name = "completions"
    path = "/v1/completions"

    def body(
        self, model: str, history: Sequence[Mapping[str, str]], turn: Turn, sampling: Sampling
    ) -> dict[str, Any]:
        if history:
            raise InvalidInputError(
                "multi-turn sessions and few-shot messages need --endpoint chat (completions has no history)"
            )
        prompt: str | list[int] = turn.prompt if isinstance(turn.prompt, str) else list(turn.prompt)
        return {"model": model, "prompt": prompt, **_STREAM, **sampling.fields(turn)}

    def output(self, event: dict[str, Any]) -> tuple[str | None, bool]:
        choices = event.get("choices")
        if not choices:
            return None, False
        text = choices[0].get("text")
        return text, bool(text)


ENDPOINTS: Final[dict[str, Endpoint]] = {"chat": ChatEndpoint(), "completions": CompletionsEndpoint()}


def get_endpoint(name: str) -> Endpoint:
    """The registered endpoint called ``name``; an unknown name lists the known ones."""
    try:
        return ENDPOINTS[name]
    except KeyError:
        raise InvalidInputError(f"unknown endpoint {name!r}; known: {', '.join(ENDPOINTS)}") from None


def check_extra_body(extra: Mapping[str, Any]) -> None:
    """An ``--extra-body`` that would change what the measurement counts on, or what an option records: one line."""
    managed = [key for key in extra if key in _MANAGED_BODY_KEYS]
    if managed:
        raise InvalidInputError(
            f"--extra-body sets {', '.join(map(repr, managed))}, which every request's body sets itself (the "
            "measurement counts on them): use --max-tokens for the output length; the others cannot be changed"
        )
    optioned = {key: option for key, option in _OPTION_BODY_KEYS.items() if key in extra}
    if optioned:  # the body won over the option while the summary recorded the option's value
        raise InvalidInputError(
            f"--extra-body sets {', '.join(map(repr, optioned))}: give "
            f"{', '.join(dict.fromkeys(optioned.values()))} instead (the summary records what the options send)"
        )


_OPTION_BODY_KEYS: Final = {
    "temperature": "--temperature",
    "top_p": "--top-p",
    "top_k": "--top-k",
    "min_tokens": "--min-tokens",
    "ignore_eos": "--ignore-eos",
    "chat_template_kwargs": "--thinking",
}
"""Body keys an option of ``alflow bench`` sets (:class:`Sampling`)."""


_MANAGED_BODY_KEYS: Final = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "stream",
        "stream_options",
        "n",
        "best_of",
        "max_tokens",
        "max_completion_tokens",
    }
)
"""Request body keys the client sets itself (:data:`_STREAM`, the bodies above): streaming with usage, one choice,
the prompt and its length. Overridden, the figures went wrong without a word (no usage: 0 input tokens)."""
