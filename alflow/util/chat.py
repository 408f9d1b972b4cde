"""Strings from a run made safe for a chat message (a regression notification posted to Slack, Mattermost, Teams).

A model id, an image name, a path or a message comes from a run and may be hostile: ``<!channel>`` pings a whole
Slack channel, ``<https://evil|Click>`` and ``[Click](https://evil)`` disguise a link, ``@here`` pings in Markdown
chats, control and bidi characters forge or reorder what a reader sees, and a 2-million-character id floods the
channel. :func:`chat_code` turns any of them into inline code, which no chat reads as a mention, a link or
formatting:

- URLs are redacted first (:func:`alflow.util.redact.redact_urls_in_text`), so a cut never keeps half a password;
- control characters (Unicode Cc) and line or paragraph separators (Zl, Zp) become spaces; format characters (Cf:
  bidi overrides, zero-width joiners) go;
- at most :data:`MAX_CHAT_FIELD` characters, cut with an ellipsis;
- a backtick (which would end the code span) becomes ``ˋ`` (U+02CB);
- ``&``, ``<`` and ``>`` are written as Slack requires (``&amp;``, ``&lt;``, ``&gt;``: Slack's "Escaping text" rules
  for messages, https://api.slack.com/reference/surfaces/formatting#escaping); Slack shows them as the characters.
"""

from __future__ import annotations

import unicodedata
from typing import Final

from alflow.util.redact import redact_urls_in_text

MAX_CHAT_FIELD: Final = 200
"""The most characters of one string a message shows (a model id, an image, a path, a message)."""


def chat_code(value: object, limit: int = MAX_CHAT_FIELD) -> str:
    """``value`` as a chat's inline code (see the module): never a mention, a link, formatting or a control."""
    kept = []
    for c in redact_urls_in_text(str(value)):
        kind = unicodedata.category(c)
        if kind in ("Cc", "Zl", "Zp"):
            kept.append(" ")
        elif kind == "Cs":  # a lone surrogate (no character: not encodable as UTF-8, a JSON body would break)
            kept.append("\ufffd")
        elif kind != "Cf":
            kept.append(c)
    text = "".join(kept).strip()
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    if not text:
        return "(none)"
    text = text.replace("`", "\u02cb").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"`{text}`"
