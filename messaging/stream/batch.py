"""What one read of a feed gives the stream driver (messaging.stream.serve)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Batch:
    frames: list[bytes] = field(default_factory=list)
    closed: str | None = None  # set: write the frames, then end the stream for this reason
    more: bool = False  # a full page was read: read again without waiting
