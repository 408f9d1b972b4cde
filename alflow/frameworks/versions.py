"""Framework versions and capability gates: is this image (or live server) new enough for its knobs.

A :class:`Capability` is one feature a configuration relies on, the first release of its framework
that has it, and where that fact comes from. Each recipe lists what a configuration needs
(``requirements``); :func:`check_capabilities` is called twice:

- before launch, with the version in the image tag (``vllm/vllm-openai:v0.11.0`` -> 0.11.0): a
  known-too-old image is refused naming the minimum; an image without a version in its tag
  (``latest``, a digest, a local name) gives a warning that reaches the run log and the report;
- after start, with the version the live server reports (vLLM ``GET /version``, SGLang
  ``GET /server_info``): the same rules, because a tag can lie (``latest``, a retagged image).

Versions follow PEP 440 closely enough for framework tags: ``0.5.16``, ``v0.20.0``, ``1.3.0rc13``,
``0.20.1.dev45+gabcdef``, ``v0.5.16-cu129``, ``0.5.16.post1``. A pre-release sorts before its release
(``1.3.0rc12 < 1.3.0rc13 < 1.3.0``); a local or build suffix is ignored. Sources are cited next to
each constant in the recipes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from alflow.errors import RecipeError

_VERSION = re.compile(
    r"^v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?"
    r"(?:[.\-_]?(?P<pre>rc|a|b|alpha|beta|dev|pre)\.?(?P<pre_n>\d*))?"
    r"(?:[.+\-_].*)?$",
    re.IGNORECASE,
)
_PRE_RANK = {"dev": 0, "a": 1, "alpha": 1, "b": 2, "beta": 2, "pre": 3, "rc": 3}
_FINAL = 4


class CapabilityError(RecipeError):
    """An image or live server too old for a knob the configuration relies on (never retried)."""


@dataclass(frozen=True, order=True)
class FrameworkVersion:
    """A framework release: ``(major, minor, patch)`` and a pre-release rank (final releases sort last)."""

    release: tuple[int, int, int]
    pre: tuple[int, int] = (_FINAL, 0)
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str | None) -> FrameworkVersion | None:
        """The version in ``text`` (a tag or a ``--version`` answer), or None when it holds none."""
        if not text:
            return None
        match = _VERSION.match(text.strip())
        if match is None:
            return None
        release = (int(match["major"]), int(match["minor"]), int(match["patch"] or 0))
        pre = (_FINAL, 0)
        if match["pre"]:
            pre = (_PRE_RANK[match["pre"].lower()], int(match["pre_n"] or 0))
        return cls(release, pre, text.strip())

    def __str__(self) -> str:
        base = "v" + ".".join(str(p) for p in self.release)
        if self.pre[0] == _FINAL:
            return base
        name = {0: "dev", 1: "a", 2: "b", 3: "rc"}[self.pre[0]]
        return f"{base}{name}{self.pre[1]}"


def version(text: str) -> FrameworkVersion:
    """A version constant (raises on a typo, at import time)."""
    parsed = FrameworkVersion.parse(text)
    if parsed is None:
        raise ValueError(f"not a version: {text!r}")
    return parsed


@dataclass(frozen=True)
class Capability:
    """A feature a configuration relies on, the first release of ``framework`` with it, and the source.

    ``consequence`` says what an older image does with the setting (fails at start, ignores it
    silently, parses it wrongly): it is the heart of the refusal message.
    """

    framework: str
    feature: str
    minimum: FrameworkVersion
    source: str
    consequence: str

    def too_old(self, found: FrameworkVersion, where: str) -> str:
        """The refusal for a version below the minimum."""
        return (
            f"{self.framework} {where} is {found}, older than {self.minimum}, the first release with "
            f"{self.feature} ({self.source}): {self.consequence}. Use {self.framework} {self.minimum} or newer"
        )

    def unknown(self, where: str) -> str:
        """The warning for a version that cannot be read."""
        return (
            f"{self.framework} version unknown ({where}): {self.feature} needs {self.minimum} or newer "
            f"({self.source}); an older one: {self.consequence}. Pin a versioned image tag to have this checked"
        )


def check_capabilities(
    capabilities: Iterable[Capability], version_text: str | None, where: str
) -> tuple[str, ...]:
    """Refuse a version below any capability's minimum; warnings when the version is unknown.

    ``where`` names what the version came from (``image 'vllm/vllm-openai:v0.11.0'``, ``live server
    (GET /version)``). Returns the warnings (none when every capability is met).
    """
    caps = tuple(capabilities)
    if not caps:
        return ()
    found = FrameworkVersion.parse(version_text)
    if found is None:
        return tuple(cap.unknown(where) for cap in caps)
    for cap in caps:
        if found < cap.minimum:
            raise CapabilityError(cap.too_old(found, where))
    return ()
