"""What an MCP server built by `mcp_tools.build_server` offers, and how it says it.

* **Tool profiles.** Every tool definition costs the model tokens on every turn, so a server
  offers the profile `HIKYAKU_MCP_TOOLS` names (for `hikyaku-mcp` in its environment, for the
  broker's `/mcp` in the broker's): `core`, the tools an agent uses every turn (who am I, what
  is new, send, and the verbs that work a task); `all`, the default; or a comma list of
  profiles and tool names (`core,outbox`). docs/CODING-AGENTS.md has the size of each profile in tokens.
* **Surfaces.** The stdio server and `/mcp` run the same tool functions, but they are not the
  same server: stdio holds a stream and buffers it (`poll` returns each item once), `/mcp` is
  stateless (`poll` lists what waits until the agent acts on it); stdio reads its credentials
  from its environment, `/mcp` from each request's headers. `Surface` holds the texts that must
  differ so that each tells its own client the truth.
* **Strict arguments.** A tool refuses arguments it does not define instead of ignoring them:
  `deregister {"agent_id": <another agent>}` must not quietly deregister the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool

from .errors import ConfigurationError

TOOLS_VARIABLE = "HIKYAKU_MCP_TOOLS"

# In the order the server lists them. `core` leaves out what an agent does once (register,
# deregister) or rarely (broadcast, outbox: `poll` already reports a question on a task it sent).
CORE = (
    "whoami",
    "agents",
    "send",
    "poll",
    "ack",
    "accept",
    "complete",
    "reject",
    "fail",
    "block",
    "reply",
    "comment",
    "cancel",
    "get_task",
)
ALL = (*CORE[:3], "broadcast", *CORE[3:], "outbox", "register", "deregister")
PROFILES: dict[str, tuple[str, ...]] = {"core": CORE, "all": ALL}
DEFAULT_PROFILE = "all"


def select_tools(spec: str | None) -> tuple[str, ...]:
    """The tool names a `HIKYAKU_MCP_TOOLS` value selects, in listing order.

    Raises `ConfigurationError` (naming the valid choices) for anything else, so a typo stops
    the server at start instead of silently offering fewer tools."""
    value = (spec or "").strip().lower() or DEFAULT_PROFILE
    if value in PROFILES:
        return PROFILES[value]
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALL and name not in PROFILES]
    if unknown or not names:
        raise ConfigurationError(
            f"{TOOLS_VARIABLE}={spec!r}: unknown tool(s) {', '.join(unknown) or '(none given)'}. "
            f"Use core, all, or a comma list of profiles and tools: {', '.join(ALL)}."
        )
    wanted = {tool for name in names for tool in PROFILES.get(name, (name,))}
    return tuple(name for name in ALL if name in wanted)


@dataclass(frozen=True)
class Surface:
    """The texts in which the two MCP servers differ."""

    name: str
    instructions: str
    whoami: str
    poll: str
    register: str
    missing_key: str
    registered_not_adopted: str


_WORKFLOW = (
    "Hikyaku is a message broker between coding agents. Messages you receive are tasks in your "
    "inbox: ack one you only read, or accept it and finish with complete, reject or fail; block "
    "asks the sender a question, who answers with reply. get_task shows a task's messages. "
)

STDIO = Surface(
    name="stdio",
    instructions=_WORKFLOW
    + "poll returns what is new (messages, and changes on tasks you sent or work on) once each.",
    whoami="Who this agent is (id, name, tenant), whom it may send to and hear from, its ceiling and policy revision; the inbox stream's state.",
    poll="New messages and changes on your tasks since the last poll, each returned once; "
    "items a filter leaves out stay for the next poll.",
    register="Register a new agent with the tenant API key (api_key or HIKYAKU_API_KEY). "
    "A server started without an agent acts as the new one.",
    missing_key="No tenant API key: pass api_key (hky_…), or start hikyaku-mcp with "
    "HIKYAKU_API_KEY set.",
    registered_not_adopted="Its agent_token is shown only once.",
)

HTTP = Surface(
    name="http",
    instructions=_WORKFLOW
    + "poll lists what waits for you (unread messages, questions on tasks you sent) until you "
    "act on it.",
    whoami="Who this agent is (id, name, tenant), whom it may send to and hear from, its ceiling and policy revision.",
    poll="What waits for you: unread messages, and tasks you sent whose recipient asked you "
    "something. An item is listed again until you act on it.",
    register="Register a new agent with a tenant API key (api_key, or the key this request "
    "authenticated with). Answers the new agent's token once.",
    missing_key="No tenant API key: pass api_key (hky_…), or call /mcp with "
    "'Authorization: Bearer <tenant key>' and 'X-Agent-Id: <your agent id>'. "
    "An agent token cannot register agents.",
    registered_not_adopted="Its agent_token is shown only once; to act as it, call /mcp with "
    "'Authorization: Bearer <agent_token>'.",
)


class StrictTool(Tool):
    """A tool that refuses arguments its input schema does not define.

    The MCP SDK validates arguments with a model that ignores unknown keys, so a caller who
    names a target the tool does not take (`agents {"agent_id": X}`, `deregister {"agent_id":
    <another agent>}`) gets the tool's default behaviour on its own identity. The input schema
    says `additionalProperties: false` too, for clients that check before sending."""

    async def run(self, arguments: dict[str, Any], context: Any, convert_result: bool = False):
        accepted = list((self.parameters.get("properties") or {}).keys())
        unknown = sorted(set(arguments) - set(accepted))
        if unknown:
            raise ToolError(unknown_arguments_message(self.name, unknown, accepted))
        return await super().run(arguments, context, convert_result=convert_result)


def unknown_arguments_message(tool: str, unknown: list[str], accepted: list[str]) -> str:
    refused = ", ".join(unknown)
    if not accepted:
        return f"{tool} takes no arguments (it acts on the calling agent); refused: {refused}."
    return f"{tool} does not take {refused}; its arguments are: {', '.join(accepted)}."


def compact_schema(schema: Any) -> Any:
    """Tool input schemas without what costs tokens and says nothing: titles, and the
    `anyOf [T, null]` + `default: null` of optional parameters (absent means none)."""
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    compacted = {k: compact_schema(v) for k, v in schema.items() if k != "title"}
    any_of = compacted.get("anyOf")
    if isinstance(any_of, list) and {"type": "null"} in any_of:
        rest = [option for option in any_of if option != {"type": "null"}]
        del compacted["anyOf"]
        if len(rest) == 1:
            compacted = {**rest[0], **compacted}
        elif rest:
            compacted["anyOf"] = rest
        if compacted.get("default", ...) is None:
            del compacted["default"]
    elif compacted.get("default", ...) is None:
        del compacted["default"]
    return compacted
