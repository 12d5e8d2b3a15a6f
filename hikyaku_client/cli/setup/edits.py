"""The file changes `hikyaku setup` makes, each one it can apply, show and undo.

An edit owns a part of one file: some keys of a JSON object (`JsonKeys`), a marked block of a
text file (`TextBlock`: Markdown, TOML, dotenv, gitignore), or a whole file (`WholeFile`).
Applying an edit to the file's current text gives the new text, so a second run that finds
its part already in place changes nothing. Undoing uses the file as it was before the first
run, which the `SetupState` keeps: a file nobody touched since is put back byte for byte (or
deleted, if setup created it); a file edited since loses only setup's part, and keys setup
overwrote get their old values back.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ConfigurationError


class Edit:
    """One file and setup's part of it."""

    path: Path
    secret: bool  # holds the agent token: created 0600, shown masked

    def apply(self, text: str | None) -> str:
        raise NotImplementedError

    def revert(self, text: str, original: str | None) -> str | None:
        """`text` without setup's part (restoring what `original` had there); None when
        nothing is left of a file setup created."""
        raise NotImplementedError


def _json_object(path: Path, text: str | None) -> dict[str, Any]:
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(
            f"{path} is not plain JSON ({exc}); fix it, or set it up by hand (hikyaku setup --print)."
        ) from None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{path} does not hold a JSON object; fix it first.")
    return value


def _json_text(value: dict[str, Any], like: str | None) -> str:
    """Dump as the file was written (its indent), so an untouched file round-trips."""
    indent: int | str = 2
    if like:
        match = re.search(r"^([ \t]+)\"", like, re.MULTILINE)
        if match:
            indent = len(match.group(1)) if " " in match.group(1) else match.group(1)
    return json.dumps(value, indent=indent, ensure_ascii=False) + "\n"


def _dig(obj: dict[str, Any], keys: tuple[str, ...], *, create: bool) -> dict[str, Any] | None:
    for key in keys:
        child = obj.get(key)
        if not isinstance(child, dict):
            if not create:
                return None
            child = obj[key] = {}
        obj = child
    return obj


@dataclass
class JsonKeys(Edit):
    """`values` set inside the object at `keys` (created if missing) of a JSON file."""

    path: Path
    keys: tuple[str, ...]
    values: dict[str, Any]
    secret: bool = False

    def apply(self, text: str | None) -> str:
        data = _json_object(self.path, text)
        target = _dig(data, self.keys, create=True)
        assert target is not None
        if all(target.get(k) == v for k, v in self.values.items()) and text is not None:
            return text
        target.update(self.values)
        return _json_text(data, text)

    def revert(self, text: str, original: str | None) -> str | None:
        data = _json_object(self.path, text)
        before = _json_object(self.path, original)
        target = _dig(data, self.keys, create=False)
        if target is None:
            return text
        old = _dig(before, self.keys, create=False) or {}
        for key in self.values:
            if key in old:
                target[key] = old[key]
            else:
                target.pop(key, None)
        # Drop the containers setup created and left empty, innermost first.
        for depth in range(len(self.keys), 0, -1):
            parent = _dig(data, self.keys[: depth - 1], create=False)
            inner = self.keys[depth - 1]
            if parent is None or parent.get(inner) != {}:
                break
            if _dig(before, self.keys[:depth], create=False) is not None:
                break
            del parent[inner]
        if not data and original is None:
            return None
        return _json_text(data, original or text)

    def read(self, text: str | None) -> dict[str, Any]:
        return _dig(_json_object(self.path, text), self.keys, create=False) or {}


@dataclass
class TextBlock(Edit):
    """A block between two marker lines in a text file; `comment` is how the format
    comments a line (`#` or an HTML comment for Markdown)."""

    path: Path
    body: str
    comment: str = "#"
    secret: bool = False
    what: str = "written by hikyaku setup"

    def _line(self, text: str) -> str:
        return f"<!-- {text} -->" if self.comment == "<!--" else f"{self.comment} {text}"

    @property
    def begin(self) -> str:
        return self._line(f">>> hikyaku: {self.what}")

    @property
    def end(self) -> str:
        return self._line("<<< hikyaku")

    def _span(self, text: str) -> tuple[int, int] | None:
        # Found by the marker's start, so a block whose words changed is still recognised.
        prefix = self._line(">>> hikyaku").removesuffix(" -->")
        if text.startswith(prefix):
            start = 0
        else:
            start = text.find("\n" + prefix) + 1
            if start == 0:
                return None
        stop = text.find(self.end + "\n", start)
        if stop < 0:
            raise ConfigurationError(f"{self.path}: the hikyaku block has no end marker; fix it.")
        return start, stop + len(self.end) + 1

    def block(self) -> str:
        return f"{self.begin}\n{self.body.rstrip()}\n{self.end}\n"

    def apply(self, text: str | None) -> str:
        current = text or ""
        span = self._span(current)
        if span:
            return current[: span[0]] + self.block() + current[span[1] :]
        if current and not current.endswith("\n"):
            current += "\n"
        separator = "\n" if current.strip() else ""
        return current + separator + self.block()

    def revert(self, text: str, original: str | None) -> str | None:
        span = self._span(text)
        if not span:
            return text
        start, stop = span
        before, after = text[:start], text[stop:]
        if before.endswith("\n\n") and not after:
            before = before[:-1]  # the blank line `apply` put before the block
        result = before + after
        if not result.strip() and original is None:
            return None
        return result

    def read(self, text: str | None) -> dict[str, str]:
        """KEY=VALUE lines of the block (dotenv)."""
        span = self._span(text or "")
        if not span:
            return {}
        values: dict[str, str] = {}
        for line in (text or "")[span[0] : span[1]].splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                values[key.strip()] = value.strip().strip("'\"")
        return values


@dataclass
class WholeFile(Edit):
    path: Path
    content: str
    secret: bool = False

    def apply(self, text: str | None) -> str:
        return self.content

    def revert(self, text: str, original: str | None) -> str | None:
        return original


def toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are a subset of TOML's."""
    return json.dumps(value)


def dotenv_line(key: str, value: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_.:/@+=,-]*", value):
        return f"{key}={value}"
    return f"{key}={json.dumps(value)}"


# What setup remembers between runs: the files as they were, and the seats it registered.


def state_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "hikyaku" / "setup.json"


@dataclass
class SetupState:
    """`files`: path → {original, owners}; `seats`: agent id → {owners, url}. An owner is one
    setup (`codex:project:/path`); a file is restored when its last owner is removed."""

    path: Path = field(default_factory=state_path)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    seats: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls) -> SetupState:
        state = cls()
        if state.path.exists():
            data = json.loads(state.path.read_text())
            state.files, state.seats = data.get("files", {}), data.get("seats", {})
        return state

    def save(self) -> None:
        data = {"files": self.files, "seats": self.seats}
        if not self.files and not self.seats:
            if self.path.exists():
                self.path.unlink()
            return
        write_file(self.path, json.dumps(data, indent=2) + "\n", secret=True)

    def remember(self, path: Path, original: str | None, owner: str) -> None:
        entry = self.files.setdefault(str(path), {"original": original, "owners": []})
        if owner not in entry["owners"]:
            entry["owners"].append(owner)

    def original(self, path: Path) -> str | None:
        """The file before setup's first run; None if it did not exist (or is unknown)."""
        entry = self.files.get(str(path))
        return entry["original"] if entry else None

    def release(self, path: Path, owner: str) -> bool:
        """Drop `owner` from the file; True when no other setup still uses it."""
        entry = self.files.get(str(path))
        if not entry:
            return True
        if owner in entry["owners"]:
            entry["owners"].remove(owner)
        if entry["owners"]:
            return False
        del self.files[str(path)]
        return True


def read_file(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def write_file(path: Path, text: str, *, secret: bool = False) -> None:
    """Atomically; a new file that holds a secret is readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else (0o600 if secret else 0o644)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_file(path: Path, *, stop_at: Path) -> None:
    """Delete the file, then the directories it leaves empty, up to `stop_at`."""
    path.unlink(missing_ok=True)
    folder = path.parent
    while folder != stop_at and stop_at in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent


def digest(text: str | None) -> str:
    return hashlib.sha256((text or "").encode()).hexdigest()


def diff(path: Path, old: str | None, new: str | None, *, mask: list[str]) -> str:
    def lines(text: str | None) -> list[str]:
        for secret in mask:
            text = (text or "").replace(secret, "hka_…(hidden)") if secret else text
        return (text or "").splitlines(keepends=True)

    return "".join(
        difflib.unified_diff(
            lines(old),
            lines(new),
            fromfile=str(path) if old is not None else "/dev/null",
            tofile=str(path) if new is not None else "/dev/null",
        )
    )
