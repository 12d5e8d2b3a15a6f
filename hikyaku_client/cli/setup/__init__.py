"""`hikyaku setup CLIENT`: wire a coding agent to the broker in one command.

It gives the agent a seat (reuses the one a previous run stored, or the one in the environment,
if the broker still accepts it; else registers a new agent with the tenant key), then writes
the client's MCP configuration, the agent's identity and the instructions the client reads
(`clients.py` says which files, per client and scope). Running it again changes nothing;
`--dry-run` shows the changes without making them (or registering anything); `--remove` puts
every file back as it was and deregisters the agent setup registered. `--print` shows the
configuration for a client not listed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from ...config import Credentials
from ...errors import AuthenticationFailed, BrokerError, ConfigurationError, HikyakuError
from ...http import HikyakuClient
from ..output import Output, UsageError
from .clients import CLIENTS, IDENTITY, Options, Seat, Target, generic_entry
from .edits import Edit, SetupState, diff, read_file, remove_file, write_file

# Shown by --dry-run where a new seat would go (not a secret, so not masked).
PLACEHOLDER = Seat(url="", agent_id="NEW-AGENT-ID", token="hka_NEW-AGENT-TOKEN")


def add_parser(command: Any) -> None:
    """Add `setup` to the CLI; `command(name, help)` makes a subparser with the common options."""
    p = command("setup", "Wire a coding agent (Claude Code, Codex, Gemini CLI) to the broker.")
    p.add_argument(
        "client",
        nargs="?",
        choices=sorted(CLIENTS),
        metavar="CLIENT",
        help=f"one of: {', '.join(sorted(CLIENTS))}",
    )
    p.add_argument(
        "--user", action="store_true", help="the user's configuration, not the project's"
    )
    p.add_argument("--project", type=Path, help="project directory (default: the current one)")
    p.add_argument("--name", help="agent name for a new seat (default: <project>-<client>)")
    p.add_argument("--description", help="agent description for a new seat")
    p.add_argument(
        "--tools", default="core", help="MCP tools: core (default), all, or a comma list"
    )
    p.add_argument(
        "--command",
        dest="mcp_command",
        metavar="PATH",
        help="the hikyaku-mcp command the client runs (default: this installation's)",
    )
    p.add_argument(
        "--no-mcp",
        action="store_true",
        help="no MCP server entry (the Claude Code plugin brings its own)",
    )
    p.add_argument(
        "--no-instructions",
        action="store_true",
        help="no skill / AGENTS.md / GEMINI.md instructions",
    )
    p.add_argument("--dry-run", action="store_true", help="show the changes, make none")
    p.add_argument("--remove", action="store_true", help="undo what setup wrote for CLIENT")
    p.add_argument(
        "--print",
        dest="print_only",
        action="store_true",
        help="print an MCP configuration for any other client; write nothing",
    )


def default_command() -> str:
    """The `hikyaku-mcp` of this installation; its bare name when PATH finds that same one."""
    ours = Path(sys.executable).parent / "hikyaku-mcp"
    if not ours.exists():
        return shutil.which("hikyaku-mcp") or "hikyaku-mcp"
    found = shutil.which("hikyaku-mcp")
    if found and Path(found).resolve() == ours.resolve():
        return "hikyaku-mcp"
    return str(ours)


async def cmd_setup(args: argparse.Namespace, client: HikyakuClient, out: Output) -> None:
    # Imported here: mcp_profiles imports the MCP SDK, about a second of every `hikyaku`
    # command's start on these machines, and only `setup` needs it.
    from ...mcp_profiles import select_tools

    try:
        tools = (
            ",".join(select_tools(args.tools)) if args.tools not in ("core", "all") else args.tools
        )
    except ConfigurationError as exc:
        raise UsageError(f"setup: --tools: {exc}") from None
    options = Options(
        command=args.mcp_command or default_command(),
        tools=tools,
        mcp=not args.no_mcp,
        instructions=not args.no_instructions,
    )
    if args.print_only:
        if args.client or args.remove:
            raise UsageError("setup: --print is for other clients; use --dry-run with CLIENT")
        await _print(client, out, options)
        return
    if not args.client:
        raise UsageError(f"setup: name a CLIENT ({', '.join(sorted(CLIENTS))}) or use --print")
    project = (args.project or Path.cwd()).resolve()
    target = Target(args.client, args.user, project, Path.home())
    state = SetupState.load()
    if args.remove:
        await _remove(target, state, client, out, dry_run=args.dry_run)
    else:
        await _install(target, state, client, out, options, args)


async def _install(target, state, client: HikyakuClient, out: Output, options: Options, args):
    spec = CLIENTS[target.client]
    # Every file must be one setup can edit before a seat is registered for it.
    for edit in spec.plan(target, PLACEHOLDER, options).edits:
        edit.apply(read_file(edit.path))
    seat, registered = await _seat(target, client, out, args)
    plan = spec.plan(target, seat, options)
    changes = []
    for edit in plan.edits:
        current = read_file(edit.path)
        new = edit.apply(current)
        if new != current:
            changes.append((edit, current, new))
    mask = [] if seat.token == PLACEHOLDER.token else [seat.token]
    if args.dry_run:
        for edit, current, new in changes:
            out.print(diff(edit.path, current, new, mask=mask).rstrip("\n"))
        verb = "would change" if changes else "nothing to change for"
        out.progress(f"Dry run: {verb} {spec.display} ({len(changes)} file(s)); nothing written.")
        return
    for edit in plan.edits:
        current = next((c for e, c, _n in changes if e is edit), read_file(edit.path))
        state.remember(edit.path, current, target.owner)  # keeps the first run's original
    for edit, _current, new in changes:
        write_file(edit.path, new, secret=edit.secret)
    for agent_id, entry in list(state.seats.items()):  # a replaced seat is no longer ours
        if agent_id != seat.agent_id and target.owner in entry.get("owners", []):
            entry["owners"].remove(target.owner)
            if not entry["owners"]:
                del state.seats[agent_id]
    seat_entry = state.seats.setdefault(seat.agent_id, {"url": seat.url, "registered": registered})
    if target.owner not in seat_entry.setdefault("owners", []):
        seat_entry["owners"].append(target.owner)
    state.save()
    where = "for you" if target.user else f"in {target.project}"
    if not changes:
        out.print(
            f"{spec.display} is already set up {where} as agent {seat.agent_id}; nothing changed."
        )
        return
    out.print(f"{spec.display} set up {where} as agent {seat.agent_id} ({seat.url}):")
    for edit, current, _new in changes:
        what = "created" if current is None else "updated"
        secret = " (holds the agent token)" if edit.secret else ""
        out.print(f"  {what} {edit.path}{secret}")
    for note in plan.notes:
        out.progress(note)


async def _seat(target: Target, client: HikyakuClient, out: Output, args) -> tuple[Seat, bool]:
    """(seat, registered by this run): the environment's identity, else the stored one, if
    the broker accepts it; else a new agent."""
    url = client.credentials.url
    env = client.credentials
    candidates = []
    if env.agent_token and env.agent_id:
        candidates.append(("the environment", Seat(url, env.agent_id, env.agent_token)))
    stored = CLIENTS[target.client].stored(target)
    if stored.get("HIKYAKU_AGENT_TOKEN") and stored.get("HIKYAKU_AGENT_ID"):
        stored_url = stored.get("HIKYAKU_URL") or url
        seat = Seat(stored_url, stored["HIKYAKU_AGENT_ID"], stored["HIKYAKU_AGENT_TOKEN"])
        candidates.append(("the previous setup", seat))
    for origin, seat in candidates:
        if await _accepted(client, seat):
            out.progress(f"Using agent {seat.agent_id} from {origin}.")
            return seat, False
        out.progress(f"The agent from {origin} ({seat.agent_id}) is no longer accepted.")
    name = args.name or _default_name(target)
    if args.dry_run:
        out.progress(f"Dry run: would register a new agent {name!r} at {url}.")
        return Seat(url, PLACEHOLDER.agent_id, PLACEHOLDER.token), False
    description = args.description or f"{CLIENTS[target.client].display} agent ({target.root})"
    try:
        registration = await client.register(name=name, description=description)
    except ConfigurationError:
        raise ConfigurationError(
            "setup needs a seat: set HIKYAKU_API_KEY (the tenant key) to register one, or "
            "HIKYAKU_AGENT_ID + HIKYAKU_AGENT_TOKEN to use an agent you registered."
        ) from None
    out.progress(f"Registered agent {name!r} ({registration['agent_id']}).")
    return Seat(url, str(registration["agent_id"]), str(registration["agent_token"])), True


async def _accepted(client: HikyakuClient, seat: Seat) -> bool:
    """Whether the broker at the seat's URL still takes its token (a 401 or 404 says no;
    anything else, e.g. a broker that is down, is an error, not a reason for a new seat)."""
    async with _acting_as(client, seat) as probe:
        try:
            await probe.whoami()
        except AuthenticationFailed:
            return False
        except BrokerError as exc:
            if exc.status in (403, 404):
                return False
            raise
    return True


def _acting_as(client: HikyakuClient, seat: Seat) -> HikyakuClient:
    url = seat.url or client.credentials.url
    return HikyakuClient(Credentials(url=url, agent_id=seat.agent_id, agent_token=seat.token))


def _default_name(target: Target) -> str:
    base = socket.gethostname().split(".")[0] if target.user else target.project.name
    return f"{base or 'agent'}-{target.client}"


async def _remove(target, state: SetupState, client: HikyakuClient, out: Output, *, dry_run: bool):
    spec = CLIENTS[target.client]
    # Plan with a dummy seat: the paths and setup's parts do not depend on the seat.
    plan = spec.plan(target, PLACEHOLDER, Options(command="hikyaku-mcp", tools="core"))
    stored = spec.stored(target)
    changed = []
    for edit in plan.edits:
        current = read_file(edit.path)
        if current is None or _still_used(state, edit.path, target.owner):
            if not dry_run:
                state.release(edit.path, target.owner)
            continue
        original = state.original(edit.path)
        new = _restored(edit, edit.revert(current, original), original)
        if new != current:
            changed.append((edit, current, new))
        if not dry_run:
            state.release(edit.path, target.owner)
            if new is None:
                inside = target.project in edit.path.parents and not target.user
                remove_file(edit.path, stop_at=target.project if inside else target.home)
            elif new != current:
                write_file(edit.path, new, secret=edit.secret)
    mask = [stored.get("HIKYAKU_AGENT_TOKEN", "")]
    if dry_run:
        for edit, current, new in changed:
            out.print(diff(edit.path, current, new, mask=mask).rstrip("\n"))
        out.progress(f"Dry run: would restore {len(changed)} file(s); nothing written.")
        return
    await _release_seat(state, stored, target, client, out)
    state.save()
    if not changed:
        out.print(f"Nothing of hikyaku setup {target.client} to remove.")
        return
    out.print(f"Removed hikyaku from {spec.display}:")
    for edit, _current, new in changed:
        out.print(f"  {'deleted' if new is None else 'restored'} {edit.path}")


def _restored(edit: Edit, reverted: str | None, original: str | None) -> str | None:
    """The original text itself when the revert means the same (its own formatting back)."""
    if reverted is None or original is None:
        return reverted
    if edit.path.suffix == ".json":
        try:
            same = json.loads(reverted) == json.loads(original)
        except ValueError:
            same = False
    else:
        same = reverted.rstrip() == original.rstrip()
    return original if same else reverted


def _still_used(state: SetupState, path: Path, owner: str) -> bool:
    entry = state.files.get(str(path))
    return bool(entry) and any(other != owner for other in entry["owners"])


async def _release_seat(state, stored: dict[str, str], target: Target, client, out) -> None:
    agent_id = stored.get("HIKYAKU_AGENT_ID", "")
    entry = state.seats.get(agent_id)
    if not entry:
        return
    owners = entry.get("owners", [])
    if target.owner in owners:
        owners.remove(target.owner)
    if owners:
        return
    del state.seats[agent_id]
    if not entry.get("registered") or not stored.get("HIKYAKU_AGENT_TOKEN"):
        return
    seat = Seat(stored.get("HIKYAKU_URL", ""), agent_id, stored["HIKYAKU_AGENT_TOKEN"])
    async with _acting_as(client, seat) as probe:
        try:
            await probe.deregister()
            out.progress(f"Deregistered agent {agent_id}, which setup had registered.")
        except HikyakuError as exc:
            out.progress(f"Could not deregister agent {agent_id}: {exc}")


async def _print(client: HikyakuClient, out: Output, options: Options) -> None:
    target = Target("print", False, Path.cwd(), Path.home())
    env = client.credentials
    if env.agent_token and env.agent_id:
        seat = Seat(env.url, env.agent_id, env.agent_token)
    else:
        name = f"{Path.cwd().name}-agent"
        registration = await client.register(name=name, description=f"MCP client ({target.root})")
        seat = Seat(env.url, str(registration["agent_id"]), str(registration["agent_token"]))
        out.progress(f"Registered agent {name!r} ({seat.agent_id}); its token is shown only once.")
    out.json(generic_entry(seat, options))
    out.progress(
        "Put this where your client reads MCP servers. Keep HIKYAKU_AGENT_TOKEN out of files "
        "you commit: most clients can take it from their environment or a secret store "
        f"instead ({', '.join(IDENTITY)})."
    )
