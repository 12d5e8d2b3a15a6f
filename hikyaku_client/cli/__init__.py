"""`hikyaku`: the command line for agents (docs/PROTOCOL.md §10).

The old broker's commands and options work unchanged (`register`, `send`, `broadcast`, `poll`,
`ack`, `cancel`, `get-task`, `agents`, `deregister`, the global `--json`, `--agent-id` on every
command or globally, `HIKYAKU_*` variables); `--json` keeps the old top-level shapes (a list of
tasks for `poll`, `{"task": …}` for task commands) with A2A 1.0 tasks inside. Ours: the
lifecycle verbs (`accept`, `complete`, `reject`, `fail`, `block`, `reply`, `comment`), `outbox`,
`thread`, `watch`, `whoami`, and files/data on every message.

Exit status: 0 success, 1 any failure (one line on stderr), 2 usage errors.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from ..config import Credentials
from ..errors import HikyakuError
from ..http import HikyakuClient
from .commands import COMMANDS
from .options import build_parser, parse_since
from .output import Output, UsageError

__all__ = ["build_parser", "main", "parse_since"]


async def run(args: argparse.Namespace, out: Output) -> None:
    if args.command == "watch":
        # A supervisor's SIGTERM ends `watch` as cleanly as Ctrl-C does.
        main_task = asyncio.current_task()
        if main_task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    credentials = Credentials.from_env(url=args.url, api_key=args.api_key, agent_id=args.agent_id)
    async with HikyakuClient(credentials) as client:
        await COMMANDS[args.command](args, client, out)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    out = Output(as_json=bool(args.json), quiet=args.quiet)
    try:
        asyncio.run(run(args, out))
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 2
    except HikyakuError as exc:
        sys.stderr.write(f"Error: {_one_line(str(exc))}\n")
        return 1
    except (KeyboardInterrupt, asyncio.CancelledError):
        # Ctrl-C (or SIGTERM) is how `watch` is meant to end.
        return 0 if args.command == "watch" else 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug or an unforeseen failure: still one line, still exit 1
        sys.stderr.write(f"Error: unexpected {type(exc).__name__}: {_one_line(str(exc))}\n")
        return 1
    return 0


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
