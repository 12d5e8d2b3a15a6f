"""Garbage collection in the server processes (docs/ARCHITECTURE.md, Serving topology, "The
loaded heap is frozen"; figures in docs/MEASUREMENTS.md, Garbage collection).

Once Django, the apps and their modules are loaded, a process holds 110,000–170,000 objects
that live as long as it does. CPython's full collection walks every one of them each time it
runs: 34 ms in a web process here, with the GIL held, so every request thread and every stream
of the process stops meanwhile. `settle` moves them out of the collector's sight once loading
is done.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what loading left behind, then freeze the survivors: the collector ignores
    them from now on. One dropped later is still freed when its last reference goes; only a
    cycle of them would stay, and what loading builds (modules, classes, settings, URL
    patterns) lives as long as the process."""
    gc.collect()
    gc.freeze()
