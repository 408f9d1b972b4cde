"""The request bodies alflow's servers take, as pydantic models: a bad field is a 400 that names it.

Types are strict, as vLLM's are: ``"max_tokens": "ten"`` or ``"stream": "yes"`` are refused, not
coerced; numbers must be finite. Unknown fields are accepted and ignored, as OpenAI-compatible servers
do. What a field allows here is what the OpenAI API allows; what one engine cannot serve (``n > 1``, a
context limit) its adapter refuses with the same kind of 400.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails

from alflow.serving.api import ApiError

TokenId = Annotated[int, Field(ge=0)]
M = TypeVar("M", bound="Body")

MAX_BODY_BYTES = 64 * 1024 * 1024
"""The largest request body a server reads (long prompts as token ids fit)."""


DEFAULT_COMPLETION_MAX_TOKENS = 16
"""``max_tokens`` of a completion that gives none (a chat's default is the rest of the context)."""


class Body(BaseModel):
    """Strict, unknown fields kept and ignored, no NaN or infinity."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False, frozen=True)


class StreamOptions(Body):
    """``stream_options`` of a streaming request."""

    include_usage: bool | None = None


class ContentPart(Body):
    """One part of a message's content (text only: these servers serve text models)."""

    type: str = "text"
    text: str | None = None


class Message(Body):
    """One chat message."""

    role: str
    content: str | list[ContentPart] | None = None


def message_text(message: Message, index: int) -> str:
    """The message's text; a part that is not text is a 400 naming the message."""
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for part in content:
        if part.type != "text" or part.text is None:
            raise ApiError(
                400,
                f"messages[{index}].content: only text parts are served (got a {part.type!r} part)",
                "messages",
            )
        texts.append(part.text)
    return "".join(texts)


class SamplingFields(Body):
    """The fields every generation request shares (None: the server's default)."""

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    min_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0.0, le=100.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1)
    seed: int | None = Field(None, ge=-(1 << 63), lt=1 << 63)
    n: int | None = Field(None, ge=1)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool | None = None
    logit_bias: dict[str, float] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options can only be set when stream is true")
        return self

    @property
    def include_usage(self) -> bool:
        """Whether the stream ends with a usage chunk."""
        return bool(self.stream and self.stream_options and self.stream_options.include_usage)

    @property
    def thinking(self) -> bool:
        """Qwen3-style ``{"enable_thinking": true}`` or DeepSeek-style ``{"thinking": true}``; off by default."""
        kwargs = self.chat_template_kwargs or {}
        return any(kwargs.get(key) is True for key in ("enable_thinking", "thinking"))

    def stops(self) -> tuple[str, ...]:
        """``stop`` as a tuple of strings (empty when absent)."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class CompletionRequest(SamplingFields):
    """``POST /v1/completions``: a text prompt or token ids (or a batch of one of them)."""

    prompt: str | list[TokenId] | list[str] | list[list[TokenId]]

    def single_prompt(self) -> str | list[int]:
        """The one prompt (a batch of one unwrapped); a larger batch or an empty prompt is a 400."""
        prompt = self.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], str | list):
            if len(prompt) != 1:
                raise ApiError(
                    400, f"prompt: a batch of {len(prompt)} prompts; this server takes one", "prompt"
                )
            prompt = prompt[0]
        if not prompt:
            raise ApiError(400, "prompt: must not be empty", "prompt")
        return prompt  # type: ignore[return-value]


class ChatRequest(SamplingFields):
    """``POST /v1/chat/completions``."""

    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    add_generation_prompt: bool | None = None

    def pairs(self) -> list[tuple[str, str]]:
        """``(role, text)`` of every message."""
        return [(m.role, message_text(m, i)) for i, m in enumerate(self.messages)]

    @property
    def output_cap(self) -> int | None:
        """``max_tokens``, else ``max_completion_tokens``."""
        return self.max_tokens if self.max_tokens is not None else self.max_completion_tokens


def output_budget(
    body: CompletionRequest | ChatRequest, n_prompt: int, limit: int, drafts: int | None = None
) -> int:
    """``max_tokens`` of a request whose prompt has ``n_prompt`` tokens in a context of ``limit``; a 400 if it does not fit.

    ``drafts``: the K positions an engine keeps free beside prompt and output (named in the messages), None: none.
    """
    chat = isinstance(body, ChatRequest)
    k = drafts or 0
    if n_prompt + k >= limit:
        plus = "" if drafts is None else f" (plus K={k} draft positions)"
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, your prompt has "
            f"{n_prompt} tokens{plus}. Please reduce the length of the input.",
            "messages" if chat else "prompt",
        )
    max_tokens = body.output_cap if isinstance(body, ChatRequest) else body.max_tokens
    if max_tokens is None:
        max_tokens = limit - n_prompt - k if chat else DEFAULT_COMPLETION_MAX_TOKENS
    if n_prompt + max_tokens + k > limit:
        asked = f"{max_tokens}" if drafts is None else f"max_tokens={max_tokens}"
        plus = "" if drafts is None else f" and K={k} draft positions"
        raise ApiError(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{n_prompt + max_tokens} tokens ({n_prompt} in the input, {asked} in the completion){plus}. "
            "Please reduce the length of the input or completion.",
            "max_tokens",
        )
    return max_tokens


class TokenizeRequest(Body):
    """``POST /tokenize`` (vLLM style): a prompt, or messages rendered with the chat template."""

    prompt: str | None = None
    messages: list[Message] | None = Field(None, min_length=1)
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give a string prompt or messages")
        return self

    def pairs(self) -> list[tuple[str, str]]:
        """``(role, text)`` of every message."""
        return [(m.role, message_text(m, i)) for i, m in enumerate(self.messages or ())]


class DetokenizeRequest(Body):
    """``POST /detokenize`` (vLLM style)."""

    tokens: list[TokenId]


HINTS = {
    "prompt": "must be a string or a non-empty list of non-negative token ids (or a batch of one of them)",
    "stop": "must be a string or a list of strings",
    "messages": "must be a non-empty list of {role, content} objects (content: a string or text parts)",
    "tokens": "must be a list of non-negative integer token ids",
}
"""What a field of a union (or nested) type allows, in words: pydantic's own message lists every branch."""


def _where(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not text:
            text = part
        elif not any(c in part for c in "[]-,"):  # skip pydantic's union branch tags such as list[str]
            text += f".{part}"
    return text


def _message(errors: list[ErrorDetails]) -> tuple[str, str | None]:
    first = errors[0]
    loc = tuple(first["loc"])
    if not loc:  # a model-level rule (no single field)
        text = str(first["msg"]).removeprefix("Value error, ")
        param = "stream_options" if "stream_options" in text else ("prompt" if "prompt" in text else None)
        return text, param
    param = str(loc[0])
    if first["type"] == "missing":
        return f"{_where(loc)}: required", param
    if param in HINTS:
        return f"{param}: {HINTS[param]}", param
    return f"{_where(loc)}: {first['msg']}", param


def parse(model: type[M], body: object) -> M:
    """Validate a JSON body against ``model``; a :class:`ApiError` (400) names the first bad field."""
    if not isinstance(body, dict):
        raise ApiError(400, f"request body must be a JSON object, got {type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        message, param = _message(exc.errors(include_input=False, include_url=False))
        raise ApiError(400, message, param) from None


def loads(raw: bytes) -> object:
    """The JSON value of a request body; invalid JSON is a 400."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from None
