r"""The tiny engine's chat template: plain text turns for a base model that has no template of its own.

Gemma 3 270M (the bundled model) is a *base* model: it ships no chat template, so ``alflow tiny
serve`` renders messages in this fixed, documented form::

    {system content}\n\n                 (each system message, if any)
    User: {user content}\n\n
    Assistant: {assistant content}\n\n
    ...
    Assistant:                          (the generation prompt)

and adds :data:`TURN_STOP` (``"\nUser:"``) to the stop strings of every chat request, so a reply
ends where the model starts writing the next user turn (a base model continues the dialogue
otherwise). The stop string is not part of the reply text, as with OpenAI's ``stop``. The rendered
text is tokenized with the model's BOS token in front.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

ROLE_PREFIX: Final = {"system": "", "user": "User: ", "assistant": "Assistant: "}
"""The text in front of each role's content."""
TURN_END: Final = "\n\n"
"""The text after each message."""
GENERATION_PROMPT: Final = "Assistant:"
"""The text that asks the model for the assistant's reply."""
TURN_STOP: Final = "\nUser:"
"""Stop string added to every chat request: the model has begun the next user turn."""


class ChatTemplateError(ValueError):
    """A message the template cannot render (unknown role); the message names its index."""


def render_chat(messages: Sequence[tuple[str, str]], *, add_generation_prompt: bool = True) -> str:
    """``(role, content)`` pairs as one prompt text in the template above.

    Roles are ``system``, ``user`` and ``assistant``; anything else raises :class:`ChatTemplateError`.
    """
    parts: list[str] = []
    for index, (role, content) in enumerate(messages):
        prefix = ROLE_PREFIX.get(role)
        if prefix is None:
            raise ChatTemplateError(
                f"messages[{index}].role {role!r} is not supported; use one of {', '.join(ROLE_PREFIX)}"
            )
        parts.append(f"{prefix}{content}{TURN_END}")
    if add_generation_prompt:
        parts.append(GENERATION_PROMPT)
    return "".join(parts)


def chat_stops(stop: Sequence[str]) -> tuple[str, ...]:
    """The stop strings of a chat request: the caller's plus :data:`TURN_STOP` (once)."""
    return (*stop, TURN_STOP) if TURN_STOP not in stop else tuple(stop)
