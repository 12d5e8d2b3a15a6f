"""Where the CLI writes: results to stdout, progress and errors to stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.text import Text

from .. import render


class UsageError(Exception):
    """Bad options or arguments: exit status 2."""


class Output:
    """Where results and progress go: results to stdout, progress and errors to stderr."""

    def __init__(self, *, as_json: bool, quiet: bool) -> None:
        self.as_json = as_json
        self.quiet = quiet
        self.out = render.make_console()
        self.err = render.make_console(stderr=True)

    def json(self, value: Any, *, compact: bool = False) -> None:
        text = json.dumps(value, separators=(",", ":")) if compact else json.dumps(value, indent=2)
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    def print(self, *renderables: Any) -> None:
        # Plain strings are printed as text, never as rich markup (they carry user content).
        self.out.print(*(Text(r) if isinstance(r, str) else r for r in renderables))

    def progress(self, message: str | Text) -> None:
        if not self.quiet:
            self.err.print(Text(message, style="dim") if isinstance(message, str) else message)
