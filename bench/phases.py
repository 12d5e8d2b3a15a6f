"""The benchmark's phases. Each one measures server CPU between two /proc snapshots.

A phase returns a `PhaseResult`: how many operations it did, its wall time, the server CPU per
component (bench/cpu.py), the client's own CPU, and latency when a load generator measured it.
Everything a phase sent or received is recorded in the `Ledger`, which the checks read at the
end. A new phase (e.g. issue 4's streams) is one more function taking the `Bench` and returning
a `PhaseResult`, plus a line in bench/run.py.
"""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from . import a2a
from .cpu import CpuMeter, self_cpu_ms
from .http import Connection
from .load import LoadResult, PlanRow, percentiles, run_plan


@dataclass
class Agent:
    id: str
    token: str  # "" where the broker issues none (the old broker)
    name: str
    api_key: str  # the tenant key it was registered with (the 0.3 dialect's credential)


@dataclass
class Ledger:
    """What was sent and what was found in inboxes, keyed by (messageId, recipient)."""

    expected: dict[tuple[str, str], str] = field(default_factory=dict)  # -> sender
    failed_sends: list[Any] = field(default_factory=list)
    deliveries: list[tuple[str, a2a.Delivery]] = field(default_factory=list)  # (inbox, task)
    acked_task_ids: Counter = field(default_factory=Counter)
    failed_acks: list[Any] = field(default_factory=list)
    undrained_agents: list[str] = field(default_factory=list)

    def check(self) -> dict[str, Any]:
        received = Counter((d.message_id, inbox) for inbox, d in self.deliveries)
        known_messages = {message_id for message_id, _ in self.expected}
        cross = [
            (inbox, d.message_id)
            for inbox, d in self.deliveries
            if d.recipient != inbox
            or (
                d.message_id in known_messages
                and (
                    (d.message_id, inbox) not in self.expected
                    or self.expected[(d.message_id, inbox)] != d.sender
                )
            )
        ]
        return {
            "expected": len(self.expected),
            "received": len(self.deliveries),
            "lost": sum(1 for key in self.expected if received[key] == 0),
            "duplicated": sum(n - 1 for n in received.values() if n > 1)
            + sum(n - 1 for n in self.acked_task_ids.values() if n > 1),
            "cross_delivered": len(cross),
            "unexpected": sum(1 for _, d in self.deliveries if d.message_id not in known_messages),
            "failed_sends": len(self.failed_sends),
            "failed_acks": len(self.failed_acks),
            "undrained_agents": len(self.undrained_agents),
            "examples": {
                "failed_sends": self.failed_sends[:3],
                "failed_acks": self.failed_acks[:3],
                "cross_delivered": cross[:3],
            },
        }


@dataclass
class PhaseResult:
    name: str
    ops: int
    seconds: float
    cpu_ms: dict[str, float]
    client: str
    client_cpu_ms: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def per_op(self) -> dict[str, float]:
        return {k: v / self.ops for k, v in self.cpu_ms.items()} if self.ops else {}

    def machine(self) -> dict[str, float]:
        """How busy the whole machine was, and with how much work that is not ours."""
        capacity = self.cpu_ms.get("machine_capacity") or 1.0
        busy = self.cpu_ms.get("machine_busy", 0.0)
        other = max(0.0, busy - self.cpu_ms["total"] - self.client_cpu_ms)
        return {
            "busy_share": round(busy / capacity, 3),
            "other_work_share": round(other / capacity, 3),
        }

    def as_json(self) -> dict[str, Any]:
        return {
            "ops": self.ops,
            "seconds": round(self.seconds, 3),
            "ops_per_s": round(self.ops / self.seconds, 1) if self.seconds else None,
            "cpu_ms": {k: round(v, 1) for k, v in self.cpu_ms.items()},
            "cpu_ms_per_op": {k: round(v, 4) for k, v in self.per_op.items()},
            "client": {
                "generator": self.client,
                "cpu_ms": round(self.client_cpu_ms, 1),
                "cpu_ms_per_op": round(self.client_cpu_ms / self.ops, 4) if self.ops else None,
            },
            "latency_ms": {k: round(v, 2) for k, v in self.latency_ms.items()},
            "machine": self.machine(),
            **self.extra,
        }


@dataclass
class Bench:
    base_url: str
    api_key: str
    meter: CpuMeter
    concurrency: int
    generator: str
    payload_bytes: int
    dialect: a2a.Dialect = a2a.V1
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))
    agents: list[Agent] = field(default_factory=list)
    ledger: Ledger = field(default_factory=Ledger)
    rng: random.Random = field(default_factory=lambda: random.Random(20_26))

    @property
    def host_port(self) -> tuple[str, int]:
        parts = urlsplit(self.base_url)
        return parts.hostname or "127.0.0.1", parts.port or 80

    def connection(self) -> Connection:
        return Connection(*self.host_port)


def measured(bench: Bench, name: str, work: Callable[[], Any]) -> tuple[Any, dict, float, float]:
    """Run `work` between two snapshots: (its value, server CPU ms, seconds, own CPU ms)."""
    before = bench.meter.snapshot()
    own_before, t0 = self_cpu_ms(), time.monotonic()
    value = work()
    seconds, own = time.monotonic() - t0, self_cpu_ms() - own_before
    after = bench.meter.snapshot()
    return value, bench.meter.delta(before, after), seconds, own


def from_load(name: str, load: LoadResult, cpu: dict[str, float], **extra: Any) -> PhaseResult:
    return PhaseResult(
        name=name,
        ops=len(load.ok),
        seconds=load.seconds,
        cpu_ms=cpu,
        client=load.generator,
        client_cpu_ms=load.client_cpu_ms,
        latency_ms=load.latency_ms,
        extra={
            "failed": len(load.failed),
            "unknown_outcome": len(load.unknown),
            "generator_errors": load.errors,
            **extra,
        },
    )


# --- registration ---------------------------------------------------------------------------


def register_agents(bench: Bench, count: int) -> PhaseResult:
    async def work() -> list[Agent]:
        conn = bench.connection()
        agents = []
        for i in range(count):
            name = f"bench-agent-{i:02d}"
            resp = await conn.post_json(
                "/api/v1/agents",
                {"name": name, "description": "benchmark agent"},
                headers={"Authorization": f"Bearer {bench.api_key}"},
            )
            if resp.status != 201:
                raise SystemExit(f"Registering {name} failed: {resp.status} {resp.body[:300]!r}")
            body = resp.json()
            agent = Agent(body["agent_id"], body.get("agent_token", ""), name, bench.api_key)
            agents.append(agent)
        await conn.close()
        return agents

    agents, cpu, seconds, own = measured(bench, "register", lambda: asyncio.run(work()))
    bench.agents = agents
    return PhaseResult("register", len(agents), seconds, cpu, "python", own)


# --- floor ----------------------------------------------------------------------------------


def floor_rows(bench: Bench, count: int, tag: str) -> list[PlanRow]:
    rows = []
    for i in range(count):
        row_id = f"{tag}-{bench.run_id}-{i}"
        body = {"id": row_id, "text": a2a.message_text(row_id, "floor", bench.payload_bytes)}
        rows.append(PlanRow(row_id, "/bench/floor", {}, a2a.compact(body)))
    return rows


def floor(bench: Bench, count: int) -> PhaseResult:
    rows = floor_rows(bench, count, "floor")
    load, cpu, _, _ = measured(bench, "floor", lambda: _load(bench, rows, expect='"id"'))
    return from_load("floor", load, cpu)


def warm_floor(bench: Bench, count: int) -> None:
    _load(bench, floor_rows(bench, count, "warm"), expect='"id"')


def _load(bench: Bench, rows: list[PlanRow], *, expect: str) -> LoadResult:
    return run_plan(
        bench.base_url,
        rows,
        concurrency=bench.concurrency,
        expect=expect,
        generator=bench.generator,
    )


# --- unicast sends ----------------------------------------------------------------------------


def send_rows(bench: Bench, count: int, tag: str) -> list[PlanRow]:
    """`count` unicasts between random pairs of agents (self-sends included, as allowed)."""
    rows = []
    for i in range(count):
        sender, recipient = bench.rng.choice(bench.agents), bench.rng.choice(bench.agents)
        message_id = f"{tag}-{bench.run_id}-{i}"
        text = a2a.message_text(message_id, recipient.id, bench.payload_bytes)
        body = bench.dialect.send_message(
            message_id=message_id, destination=recipient.id, text=text
        )
        headers = bench.dialect.credentials(sender)
        rows.append(PlanRow(message_id, bench.dialect.path, headers, a2a.compact(body)))
        bench.ledger.expected[(message_id, recipient.id)] = sender.id
    return rows


def send_unicasts(bench: Bench, count: int, tag: str = "send") -> PhaseResult:
    rows = send_rows(bench, count, tag)
    load, cpu, _, _ = measured(bench, tag, lambda: _load(bench, rows, expect='"result"'))
    failed = {plan_id for plan_id, _, _ in load.failed}
    bench.ledger.failed_sends += load.failed
    # A send that answered with an error delivered nothing: do not expect it in an inbox.
    for key in [key for key in bench.ledger.expected if key[0] in failed]:
        del bench.ledger.expected[key]
    return from_load(tag, load, cpu)


# --- drain: ListTasks + ack -----------------------------------------------------------------


async def _drain_agent(
    bench: Bench, agent: Agent, gate: asyncio.Semaphore, stats: Counter, ack_ms: list[float]
) -> None:
    conn = bench.connection()
    dialect = bench.dialect
    hdrs = {"Content-Type": "application/json", **dialect.credentials(agent)}
    seen: set[str] = set()
    async with gate:
        for _ in range(10_000):
            resp = await conn.request(
                "POST",
                dialect.path,
                headers=hdrs,
                body=a2a.compact(dialect.list_inbox(agent_id=agent.id)).encode(),
            )
            stats["lists"] += 1
            try:
                tasks = a2a.result(resp.json())["tasks"]
            except (ValueError, KeyError, a2a.RpcError) as exc:
                bench.ledger.failed_acks.append(("list", agent.id, str(exc)[:300]))
                break
            if not tasks:
                break
            fresh = [t for t in tasks if t["id"] not in seen]
            if not fresh:  # the same unread tasks again: acks are not taking effect
                bench.ledger.undrained_agents.append(agent.id)
                break
            for task in fresh:
                seen.add(task["id"])
                bench.ledger.deliveries.append((agent.id, a2a.delivery(task)))
                ack_id = f"ack-{task['id']}"
                t0 = time.monotonic()
                body = dialect.ack(message_id=ack_id, task_id=task["id"])
                resp = await conn.request(
                    "POST", dialect.path, headers=hdrs, body=a2a.compact(body).encode()
                )
                ack_ms.append((time.monotonic() - t0) * 1000)
                stats["acks"] += 1
                try:
                    state = a2a.result(resp.json())["task"]["status"]["state"]
                except (ValueError, KeyError, a2a.RpcError) as exc:
                    bench.ledger.failed_acks.append((task["id"], str(exc)[:300]))
                    continue
                if state != dialect.completed:
                    bench.ledger.failed_acks.append((task["id"], f"state {state}"))
                    continue
                bench.ledger.acked_task_ids[task["id"]] += 1
    await conn.close()


def drain(bench: Bench, name: str) -> PhaseResult:
    """Every agent lists its unread inbox (pages of 100) and acks each task until empty."""
    stats: Counter = Counter()
    ack_ms: list[float] = []
    acked_before = sum(bench.ledger.acked_task_ids.values())

    async def work() -> None:
        gate = asyncio.Semaphore(bench.concurrency)
        await asyncio.gather(*(_drain_agent(bench, a, gate, stats, ack_ms) for a in bench.agents))

    _, cpu, seconds, own = measured(bench, name, lambda: asyncio.run(work()))
    acked = sum(bench.ledger.acked_task_ids.values()) - acked_before
    return PhaseResult(
        name,
        acked,
        seconds,
        cpu,
        "python",
        own,
        latency_ms=percentiles(ack_ms),  # of the acks
        extra={"list_requests": stats["lists"], "ack_requests": stats["acks"]},
    )


# --- broadcast --------------------------------------------------------------------------------


def broadcast(bench: Bench, count: int) -> PhaseResult:
    """`count` broadcasts, one per agent in turn, each delivered to every other agent."""
    summaries: list[dict[str, Any]] = []
    latencies: list[float] = []

    async def one(i: int, conn: Connection) -> None:
        sender = bench.agents[i % len(bench.agents)]
        message_id = f"bcast-{bench.run_id}-{i}"
        body = bench.dialect.send_message(
            message_id=message_id,
            destination="*",
            text=a2a.message_text(message_id, "*", bench.payload_bytes),
        )
        t0 = time.monotonic()
        hdrs = bench.dialect.credentials(sender)
        resp = await conn.post_json(bench.dialect.path, body, headers=hdrs)
        latencies.append((time.monotonic() - t0) * 1000)
        try:
            task = a2a.result(resp.json())["task"]
        except (ValueError, KeyError, a2a.RpcError) as exc:
            bench.ledger.failed_sends.append((message_id, resp.status, str(exc)[:300]))
            return
        summaries.append(task)
        for agent in bench.agents:
            if agent.id != sender.id:
                bench.ledger.expected[(message_id, agent.id)] = sender.id

    async def worker(indices: list[int]) -> None:
        conn = bench.connection()
        for i in indices:
            await one(i, conn)
        await conn.close()

    async def work() -> None:
        lanes = min(bench.concurrency, count)
        await asyncio.gather(*(worker(list(range(lane, count, lanes))) for lane in range(lanes)))

    _, cpu, seconds, own = measured(bench, "broadcast", lambda: asyncio.run(work()))
    deliveries = 0
    for task in summaries:
        metadata = task.get("metadata") or {}
        deliveries += int(metadata.get("recipientCount", 0))
    return PhaseResult(
        "broadcast",
        deliveries,
        seconds,
        cpu,
        "python",
        own,
        latency_ms=percentiles(latencies),
        extra={"broadcasts": len(summaries), "deliveries": deliveries},
    )


def idle(bench: Bench, seconds: float) -> PhaseResult:
    """Nothing at all: the background CPU of the components (per second, as `ops`)."""
    _, cpu, took, own = measured(bench, "idle", lambda: time.sleep(seconds))
    return PhaseResult("idle", max(1, round(took)), took, cpu, "none", own)
