"""Garbage collection in the server processes (docs/ARCHITECTURE.md, Serving topology, "The
loaded heap is frozen"; figures in docs/MEASUREMENTS.md, Garbage collection).

Once Django, the apps and their modules are loaded, a process holds 110,000–170,000 objects
that live as long as it does. CPython's full collection walks every one of them each time it
runs: 34 ms in a web process here, with the GIL held, so every request thread and every stream
of the process stops meanwhile. `settle` moves them out of the collector's sight once loading
is done. A stream process holding hundreds or thousands of streams has the same problem with
the streams' own objects, which `FreezeSurvivors` keeps out of sight in the same way.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any


def settle() -> None:
    """Collect what loading left behind, then freeze the survivors: the collector ignores
    them from now on. One dropped later is still freed when its last reference goes; only a
    cycle of them would stay, and what loading builds (modules, classes, settings, URL
    patterns) lives as long as the process."""
    gc.collect()
    gc.freeze()


class FreezeSurvivors:
    """While `holds()` is true, freeze what survives each full collection, so that the next
    one walks only what came after it.

    Right after a full collection nothing unreachable is left, so freezing then keeps no
    garbage; what it costs is that an object frozen while alive and dropped later inside a
    reference cycle is never collected. Only the cycles matter: an object without one is freed
    by its reference count, frozen or not. The stream processes' own objects leave none (their
    streams open and close, events are read and written, and no cycle is left behind,
    docs/MEASUREMENTS.md, Garbage collection; tests/messaging/test_stream_cycles.py), which is
    why the hub turns this on for a process holding many streams and not for every process: a
    Django view may leave cycles."""

    def __init__(self, holds: Callable[[], bool]) -> None:
        self.holds = holds
        self.installed = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the collector, in whichever thread ran the collection, once it is done.
        if phase == "stop" and info["generation"] == 2 and self.holds():
            gc.freeze()

    def install(self) -> None:
        if not self.installed:
            gc.callbacks.append(self)
            self.installed = True

    def remove(self) -> None:
        if self.installed:
            gc.callbacks.remove(self)
            self.installed = False
