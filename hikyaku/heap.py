"""Garbage collection in the server processes (docs/ARCHITECTURE.md, "Garbage collection").

Once Django, the apps and their modules are loaded, a process holds about 110,000 objects that
live as long as it does. CPython's full collection walks every one of them each time it runs:
about 34 ms here, with the GIL held, so every request thread and every stream of the process
stops meanwhile. `settle` moves them out of the collector's sight once loading is done.
"""

from __future__ import annotations

import gc


def settle() -> None:
    """Collect what loading left behind, then freeze the survivors: the collector ignores
    them from now on (they are never freed, which they would not be anyway)."""
    gc.collect()
    gc.freeze()
