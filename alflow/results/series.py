"""A trend line's key (:class:`SeriesKey`) and an image reference's parts: what the catalogue groups M2 points by."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import StrictInt


@dataclass(frozen=True, order=True)
class SeriesKey:
    """One trend line: the M2 points of one (framework, image, model, K, c, thinking, target AL, scheme, workload).

    At another forced AL, scheme, prompt shape or server setup the same server does other work per token: two
    lines, never each other's history (a verdict compares runs of one line only). Verdicts stored before the key
    held a field read it as ``""``: no line of a run measured now matches them. Stored as pydantic serializes it
    (``regression.json``'s ``series``, :func:`alflow.util.rows.dump_row`), read by :func:`alflow.util.rows.load_checked`.
    """

    framework: str
    image: str
    """The image repository without tag or digest (``""`` when the run had no image)."""
    model: str
    k: StrictInt
    concurrency: StrictInt
    thinking: str
    """The run config's thinking mode (``on``, ``off``...), ``""`` when absent."""
    target_al: str = ""
    """The AL the server was forced to, to 4 decimals (:func:`target_text`); ``""`` for a reference entry."""
    scheme: str = ""
    """The synthetic-acceptance scheme the audit tested against, ``""`` when not recorded."""
    workload: str = ""
    """The prompts' shape, method and server setup (:func:`alflow.results.view.workload`): another is another line."""

    def label(self) -> str:
        """``framework [image] model K=k c=.. [thinking=..] [target AL ..] [(scheme)] [workload]``: how pages name it."""
        shown = [self.framework, self.image, self.model, f"K={self.k}", f"c={self.concurrency}",
                 self.thinking and f"thinking={self.thinking}", self.target_al and f"target AL {self.target_al}",
                 self.scheme and f"({self.scheme})", self.workload]  # fmt: skip
        return " ".join(part for part in shown if part)


def target_text(target_al: float) -> str:
    """A target AL as a series key holds it: 4 decimals, as the audit reports it (``2.587`` -> ``2.5870``)."""
    return f"{target_al:.4f}"


def split_image(image: str | None) -> tuple[str, str]:
    """``registry:port/repo:tag@sha256:...`` -> (``registry:port/repo``, ``tag``); no tag -> the digest or ``""``.

    ``None`` or ``""`` -> ``("", "")``. A colon counts as the tag's only after the last ``/`` (a registry's
    port is not a tag).
    """
    if not image:
        return "", ""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return name[:colon], name[colon + 1 :]
    return name, digest
