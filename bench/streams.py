"""`make bench-streams`: the live-stream targets of issue 4, measured end to end.

    python -m bench.streams [--subscribers 1000] [--idle 10000] [--rate 100] [--seconds 30]

Production topology on this machine: Postgres, a private Redis, one granian WSGI process for
the sends (request/response), and ONE uvicorn process serving hikyaku.asgi for the streams.
Subscribers are raw asyncio sockets in several client processes (a Python HTTP client per
stream would be the bottleneck: docs/MEASUREMENTS.md). Phases:

1. live   — N subscribers; sends at R/s to random subscribers for S seconds: send→event
            latency (p50/p90/p99/max), lost and duplicated events, stream-server CPU per event.
2. storm  — N subscribers; sends continue at R/s; every subscriber drops its connection and
            reconnects with Last-Event-ID within a 5 s window: connection errors, lost, dup.
3. idle   — M idle subscribers on a fresh stream process: RSS per subscriber, thread count.

Writes bench/results/streams.json and prints a summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import testbed

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).with_name("results")
MARK = re.compile(rb"bench (\d+) (\d+)")
TICKS = os.sysconf("SC_CLK_TCK")


# Small helpers -------------------------------------------------------------------------------


def raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target


def proc_status(pid: int) -> dict[str, int]:
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "Threads"):
                values[key] = int(rest.split()[0])
    return values


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


# The environment: database, Redis, servers ---------------------------------------------------


class Environment:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.log_dir = RESULTS / "streams-logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.redis = testbed.RedisServer(log=self.log_dir / "redis.log")
        self.redis_url = self.redis.url
        self.web_port, self.stream_port = testbed.free_ports(2)
        self.procs: dict[str, testbed.Process] = {}
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "hikyaku.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "bench-streams-" + os.urandom(16).hex(),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DATABASE_URL": args.database_url,
            "REDIS_URL": self.redis_url,
            "HIKYAKU_RATE_LIMIT_PER_MINUTE": "100000000",
            "HIKYAKU_TENANT_RATE_LIMIT_PER_MINUTE": "100000000",
            # One tenant holds the sender and every subscriber (10,000 idle ones by default).
            "HIKYAKU_MAX_AGENTS_PER_TENANT": str(max(args.subscribers, args.idle) + 10),
            "HIKYAKU_LOG_FORMAT": "text",
            "HIKYAKU_LOG_LEVEL": "WARNING",
            "PYTHONUNBUFFERED": "1",
        }

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, port: int = 0
    ) -> testbed.Process:
        """Start a server in our process group, with raised fd limits; when `port` is given,
        wait until its /healthz answers."""
        proc = testbed.Process(
            argv,
            env={**self.env, **(env or {})},
            log=self.log_dir / f"{name}.log",
            name=name,
            own_session=False,
            preexec_fn=raise_fd_limit,
            fresh_log=True,
        )
        self.procs[name] = proc
        proc.start(testbed.http_ok(f"http://127.0.0.1:{port}/healthz") if port else None)
        return proc

    def prepare(self) -> None:
        self.redis.start()
        testbed.recreate_database(self.args.database_url)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--no-input", "-v0"],
            cwd=ROOT,
            env=self.env,
            check=True,
        )

    def start_web(self) -> None:
        self._spawn(
            "web",
            [
                str(Path(sys.executable).parent / "granian"),
                "--interface",
                "wsgi",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.web_port),
                "--workers",
                "1",
                "--blocking-threads",
                "4",
                "--no-access-log",
                "hikyaku.wsgi:application",
            ],
            # Persistent DB connections are right under WSGI (one thread per request), as in
            # production; not in the ASGI stream process.
            env={"DATABASE_CONN_MAX_AGE": "60"},
            port=self.web_port,
        )

    def start_streams(self) -> testbed.Process:
        if self.args.stream_server == "daphne":
            argv = [
                str(Path(sys.executable).parent / "daphne"),
                "-b",
                "127.0.0.1",
                "-p",
                str(self.stream_port),
                "hikyaku.asgi:application",
            ]
        else:
            argv = [
                sys.executable,
                *(
                    ["-m", "bench.streams", "--profiled-server"]
                    if self.args.profile_streams
                    else []
                ),
                "-m",
                "uvicorn",
                "hikyaku.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.stream_port),
                "--no-access-log",
                "--backlog",
                "4096",
                "--timeout-graceful-shutdown",
                "2",
                *self.args.uvicorn_args.split(),
            ]
        return self._spawn("streams", argv, port=self.stream_port)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None:
            proc.stop(15)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)
        self.redis.stop(15)

    def register_agents(self, count: int) -> dict:
        """A tenant with one sender and `count` subscriber agents, through the services."""
        script = (
            "import django, json, sys; django.setup()\n"
            "from tenants.services import create_tenant\n"
            "from agents.services import register_agent\n"
            "t = create_tenant(name='Bench streams', slug='bench-streams')\n"
            "def reg(n):\n"
            "    r = register_agent(tenant=t, name=n, description='bench')\n"
            "    return [str(r.agent.id), r.raw_token]\n"
            "out = {'sender': reg('sender'), 'agents': [reg(f'sub-{i}') for i in range(int(sys.argv[1]))]}\n"
            "json.dump(out, sys.stdout)\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script, str(count)],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
        )
        return json.loads(done.stdout)


# Subscribers (client processes) ----------------------------------------------------------------


class Stream:
    __slots__ = ("index", "agent_id", "token", "last_id", "records", "writer", "task", "ready")

    def __init__(self, index: int, agent_id: str, token: str) -> None:
        self.index = index
        self.agent_id = agent_id
        self.token = token
        self.last_id: str | None = None
        self.records: list[tuple[int, int, int]] = []  # (event id, seq, received ns)
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task | None = None
        self.ready: asyncio.Event | None = None


async def _read_chunk(reader: asyncio.StreamReader) -> bytes:
    line = await reader.readline()
    if not line:
        return b""
    size = int(line.split(b";")[0].strip() or b"0", 16)
    if size == 0:
        await reader.readline()
        return b""
    data = await reader.readexactly(size + 2)
    return data[:-2]


async def _connect(stream: Stream, port: int) -> asyncio.StreamReader:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    stream.writer = writer
    last = f"Last-Event-ID: {stream.last_id}\r\n" if stream.last_id is not None else ""
    writer.write(
        (
            f"GET /api/v1/subscribe HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {stream.token}\r\nA2A-Version: 1.0\r\n"
            f"Accept: text/event-stream\r\n{last}\r\n"
        ).encode()
    )
    status = await reader.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise ConnectionError(f"subscribe answered {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    return reader


async def _consume(stream: Stream, reader: asyncio.StreamReader) -> None:
    buffer = b""
    while True:
        chunk = await _read_chunk(reader)
        if not chunk:
            return
        buffer += chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            event_id = name = None
            data = b""
            for line in block.split(b"\n"):
                if line.startswith(b"id: "):
                    event_id = line[4:]
                elif line.startswith(b"event: "):
                    name = line[7:]
                elif line.startswith(b"data: "):
                    data = line[6:]
            if event_id is not None:
                stream.last_id = event_id.decode()
            if name == b"ready":
                stream.ready.set()
            elif name == b"message":
                mark = MARK.search(data)
                if mark:
                    stream.records.append((int(event_id), int(mark[1]), time.time_ns()))


async def _hold(stream: Stream, port: int, errors: list[str]) -> None:
    try:
        reader = await _connect(stream, port)
        await _consume(stream, reader)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        errors.append(f"{stream.agent_id}: {exc!r}")
        stream.ready.set()


def client_process(agents: list[tuple[int, str, str]], port: int, conn) -> None:
    """One client process: holds its share of the subscribers and obeys the coordinator."""
    raise_fd_limit()
    asyncio.run(_client_main(agents, port, conn))


async def _client_main(agents, port, conn) -> None:
    loop = asyncio.get_running_loop()
    streams = [Stream(i, a, t) for i, a, t in agents]
    errors: list[str] = []

    reconnect_ms: list[float] = []

    async def open_all(subset: list[Stream], spread: float = 0.0) -> None:
        async def one(stream: Stream) -> None:
            if spread:
                await asyncio.sleep(random.uniform(0, spread))
                if stream.task:
                    stream.task.cancel()
                if stream.writer:
                    stream.writer.transport.abort()  # drop the connection, as a crash would
            started = time.monotonic()
            stream.ready = asyncio.Event()
            stream.task = asyncio.create_task(_hold(stream, port, errors))
            await stream.ready.wait()
            reconnect_ms.append((time.monotonic() - started) * 1000)

        await asyncio.gather(*(one(s) for s in subset))

    while True:
        command, value = await loop.run_in_executor(None, conn.recv)
        if command == "connect":
            started = time.monotonic()
            for start in range(0, len(streams), 200):  # in waves, as a fleet of agents would
                await open_all(streams[start : start + 200])
            conn.send({"seconds": time.monotonic() - started, "errors": list(errors)})
        elif command == "storm":
            errors.clear()
            reconnect_ms.clear()
            started = time.monotonic()
            await open_all(streams, spread=value)
            conn.send(
                {
                    "seconds": time.monotonic() - started,
                    "errors": list(errors),
                    "reconnect_ms": list(reconnect_ms),
                }
            )
        elif command == "collect":
            for stream in streams:
                if stream.task:
                    stream.task.cancel()
                if stream.writer:
                    stream.writer.transport.abort()
            conn.send({"records": {s.index: s.records for s in streams}, "errors": list(errors)})
            return


class Clients:
    def __init__(self, agents: list[list[str]], port: int, processes: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipes, self.procs = [], []
        indexed = [(i, a, t) for i, (a, t) in enumerate(agents)]
        for n in range(processes):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=client_process, args=(indexed[n::processes], port, child))
            proc.start()
            self.pipes.append(parent)
            self.procs.append(proc)

    def command(self, command: str, value=None) -> list[dict]:
        for pipe in self.pipes:
            pipe.send((command, value))
        return [pipe.recv() for pipe in self.pipes]

    def collect(self) -> tuple[dict[int, list], list[str]]:
        replies = self.command("collect")
        for proc in self.procs:
            proc.join(10)
        records, errors = {}, []
        for reply in replies:
            records.update(reply["records"])
            errors.extend(reply["errors"])
        return records, errors


# The sender ----------------------------------------------------------------------------------


class Sender:
    """SendMessage at a fixed rate (open loop) over a few keep-alive connections to the WSGI
    server, with the send time in the text so subscribers can compute latency."""

    def __init__(self, port: int, token: str, recipients: list[str], connections: int = 8):
        self.port = port
        self.token = token
        self.recipients = recipients
        self.connections = connections
        self.sent: dict[int, dict] = {}  # seq -> {"to": index, "t0": ns, "ack": ns}
        self.failures: list[str] = []
        self.behind = 0.0  # how far the open-loop schedule slipped (s): sends queued
        self._seq = 0
        self._started = self._rate = 0.0
        self._first = 1

    async def run(self, rate: float, seconds: float) -> None:
        pool: asyncio.Queue = asyncio.Queue()
        for _ in range(self.connections):
            pool.put_nowait(await asyncio.open_connection("127.0.0.1", self.port))
        started = time.monotonic()
        self._started, self._rate, self._first = started, rate, self._seq + 1
        total = int(rate * seconds)
        pending = set()
        for n in range(total):
            delay = started + n / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.add(asyncio.create_task(self._send(pool)))
            pending = {t for t in pending if not t.done()}
        await asyncio.gather(*pending)
        while not pool.empty():
            _, writer = pool.get_nowait()
            writer.close()

    async def _send(self, pool: asyncio.Queue) -> None:
        self._seq += 1
        seq = self._seq
        to = random.randrange(len(self.recipients))
        reader, writer = await pool.get()
        t0 = time.time_ns()  # the request leaves now: latency starts here
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": seq,
                "method": "SendMessage",
                "params": {
                    "message": {
                        "messageId": f"bench-{seq}-{t0}",
                        "role": "ROLE_USER",
                        "parts": [{"text": f"bench {seq} {t0}"}],
                        "metadata": {"destination": self.recipients[to]},
                    }
                },
            }
        ).encode()
        request = (
            f"POST /a2a/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n"
            f"A2A-Version: 1.0\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.sent[seq] = {"to": to, "t0": t0, "ack": None}
        try:
            writer.write(request)
            status = await reader.readline()
            length, chunked = 0, False
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
                elif name.lower() == "transfer-encoding" and "chunked" in value:
                    chunked = True
            if chunked:
                payload = b""
                while chunk := await _read_chunk(reader):
                    payload += chunk
            else:
                payload = await reader.readexactly(length)
            if not status.startswith(b"HTTP/1.1 200") or b'"result"' not in payload:
                self.failures.append(f"{status!r} {payload[:200]!r}")
            else:
                self.sent[seq]["ack"] = time.time_ns()
            pool.put_nowait((reader, writer))
        except Exception as exc:
            self.failures.append(repr(exc))
            pool.put_nowait(await asyncio.open_connection("127.0.0.1", self.port))
        self.behind = max(self.behind, time.monotonic() - self._due(seq))

    def _due(self, seq: int) -> float:
        return self._started + (seq - self._first) / self._rate


# Verification ----------------------------------------------------------------------------------


def verify(sent: dict[int, dict], records: dict[int, list]) -> dict:
    expected: dict[int, set[int]] = {}
    for seq, info in sent.items():
        if info["ack"] is not None:
            expected.setdefault(info["to"], set()).add(seq)
    lost = duplicated = delivered = misdelivered = 0
    latency, after_ack = [], []
    for index, rows in records.items():
        ids = [r[0] for r in rows]
        duplicated += len(ids) - len(set(ids))
        rows = [r for r in rows if r[1] in sent]  # drop the warm-up's events
        got = {r[1] for r in rows}
        want = expected.get(index, set())
        lost += len(want - got)
        misdelivered += len(got - {s for s, i in sent.items() if i["to"] == index})
        seen = set()
        for _, seq, received in rows:
            if seq in seen or seq not in sent:
                continue
            seen.add(seq)
            delivered += 1
            latency.append((received - sent[seq]["t0"]) / 1e6)
            if sent[seq]["ack"]:
                after_ack.append((received - sent[seq]["ack"]) / 1e6)
    return {
        "acknowledged_sends": sum(1 for i in sent.values() if i["ack"] is not None),
        "delivered": delivered,
        "lost": lost,
        "duplicated": duplicated,
        "misdelivered": misdelivered,
        "latency_ms": {
            "p50": round(percentile(latency, 50), 2),
            "p90": round(percentile(latency, 90), 2),
            "p99": round(percentile(latency, 99), 2),
            "max": round(max(latency), 2) if latency else None,
            "mean": round(statistics.fmean(latency), 2) if latency else None,
        },
        "ack_to_event_ms": {
            "p50": round(percentile(after_ack, 50), 2),
            "p99": round(percentile(after_ack, 99), 2),
        },
    }


# Phases --------------------------------------------------------------------------------------


def phase_live(env: Environment, world: dict, args) -> dict:
    streams = env.start_streams()
    pid = streams.pid
    agents = world["agents"][: args.subscribers]
    clients = Clients(agents, env.stream_port, args.client_processes)
    connected = clients.command("connect")
    connect_errors = [e for r in connected for e in r["errors"]]
    print(f"  {len(agents)} subscribers connected in {max(r['seconds'] for r in connected):.1f}s")
    sender = Sender(env.web_port, world["sender"][1], [a for a, _ in agents])
    asyncio.run(sender.run(args.rate, 2))  # warm-up, not measured
    time.sleep(1)
    sender.sent.clear()
    cpu_before, wall_before = cpu_seconds(pid), time.monotonic()
    asyncio.run(sender.run(args.rate, args.seconds))
    time.sleep(3)
    cpu = cpu_seconds(pid) - cpu_before
    wall = time.monotonic() - wall_before
    status = proc_status(pid)
    records, errors = clients.collect()
    env.stop("streams")
    result = verify(sender.sent, records)
    result.update(
        {
            "subscribers": len(agents),
            "rate_per_second": args.rate,
            "seconds": args.seconds,
            "send_failures": len(sender.failures),
            "sender_fell_behind_seconds": round(sender.behind, 3),
            "connect_errors": len(connect_errors) + len(errors),
            "stream_server_cpu_percent": round(100 * cpu / wall, 1),
            "stream_server_cpu_ms_per_event": round(1000 * cpu / max(result["delivered"], 1), 3),
            "stream_server_threads": status["Threads"],
            "stream_server_rss_mib": round(status["VmRSS"] / 1024, 1),
            "load_average": os.getloadavg(),
        }
    )
    return result


def phase_storm(env: Environment, world: dict, args) -> dict:
    streams = env.start_streams()
    agents = world["agents"][: args.subscribers]
    clients = Clients(agents, env.stream_port, args.client_processes)
    connect_errors = [e for r in clients.command("connect") for e in r["errors"]]
    sender = Sender(env.web_port, world["sender"][1], [a for a, _ in agents])
    pids = {
        "stream_server": [streams.pid],
        "web_server": [env.procs["web"].pid],
        "subscriber_clients": [p.pid for p in clients.procs],
    }
    cpu_before = {role: sum(cpu_seconds(p) for p in ps) for role, ps in pids.items()}
    wall_before = time.monotonic()

    async def scenario() -> list[dict]:
        sending = asyncio.create_task(sender.run(args.rate, args.storm_seconds))
        await asyncio.sleep(3)
        loop = asyncio.get_running_loop()
        storm = await loop.run_in_executor(None, clients.command, "storm", args.storm_window)
        await sending
        return storm

    storm = asyncio.run(scenario())
    time.sleep(3)
    wall = time.monotonic() - wall_before
    cpu_percent = {
        role: round(100 * (sum(cpu_seconds(p) for p in ps) - cpu_before[role]) / wall, 1)
        for role, ps in pids.items()
    }
    records, errors = clients.collect()
    env.stop("streams")
    result = verify(sender.sent, records)
    storm_errors = [e for r in storm for e in r["errors"]]
    reconnect = [ms for r in storm for ms in r["reconnect_ms"]]
    result.update(
        {
            "subscribers": len(agents),
            "storm_window_seconds": args.storm_window,
            "all_reconnected_after_seconds": round(max(r["seconds"] for r in storm), 2),
            "reconnect_ms": {
                "p50": round(percentile(reconnect, 50), 1),
                "p99": round(percentile(reconnect, 99), 1),
                "max": round(max(reconnect), 1),
            },
            "reconnect_errors": len(storm_errors),
            "initial_connect_errors": len(connect_errors),
            "send_failures": len(sender.failures),
            "cpu_percent_during_phase": cpu_percent,
            "load_average": os.getloadavg(),
            "error_samples": (storm_errors + errors)[:5],
        }
    )
    return result


def phase_idle(env: Environment, world: dict, args) -> dict:
    streams = env.start_streams()
    pid = streams.pid
    agents = world["agents"][: args.idle]
    warm = Clients(agents[:20], env.stream_port, 1)  # load what the first streams load
    warm.command("connect")
    warm.collect()
    time.sleep(2)
    before = proc_status(pid)
    clients = Clients(agents, env.stream_port, args.client_processes)
    connected = clients.command("connect")
    time.sleep(args.idle_settle)
    after = proc_status(pid)
    _, errors = clients.collect()
    env.stop("streams")
    delta_kib = after["VmRSS"] - before["VmRSS"]
    return {
        "subscribers": len(agents),
        "connect_seconds": round(max(r["seconds"] for r in connected), 1),
        "connect_errors": len(errors),
        "rss_before_mib": round(before["VmRSS"] / 1024, 1),
        "rss_after_mib": round(after["VmRSS"] / 1024, 1),
        "kib_per_subscriber": round(delta_kib / len(agents), 1),
        "threads_before": before["Threads"],
        "threads_after": after["Threads"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.streams", description=__doc__.split("\n")[0])
    p.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/hikyaku_bench_streams"
    )
    p.add_argument("--subscribers", type=int, default=1000)
    p.add_argument("--idle", type=int, default=10000)
    p.add_argument("--rate", type=float, default=100)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--storm-seconds", type=float, default=15)
    p.add_argument("--storm-window", type=float, default=5)
    p.add_argument("--idle-settle", type=float, default=5)
    p.add_argument("--client-processes", type=int, default=4)
    p.add_argument(
        "--stream-server",
        choices=["uvicorn", "daphne"],
        default="uvicorn",
        help="what serves hikyaku.asgi for the streams (production: uvicorn)",
    )
    p.add_argument("--phases", default="live,storm,idle")
    p.add_argument(
        "--profile-streams",
        action="store_true",
        help="run the stream server under cProfile (bench/results/streams-logs/streams.prof)",
    )
    p.add_argument(
        "--uvicorn-args", default="", help='extra uvicorn options, e.g. "--loop asyncio --http h11"'
    )
    p.add_argument("--output", default=str(RESULTS / "streams.json"))
    args = p.parse_args(argv)

    print(f"file descriptor limit: {raise_fd_limit()}")
    env = Environment(args)
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "topology": f"granian WSGI (sends) + one {args.stream_server} hikyaku.asgi process "
        "(streams), "
        "Postgres, private Redis; raw-socket asyncio subscribers in "
        f"{args.client_processes} processes",
        "targets": {
            "latency_p50_ms": 10,
            "latency_p99_ms": 25,
            "lost": 0,
            "duplicated": 0,
            "kib_per_idle_subscriber": 50,
            "stream_server_cpu_ms_per_event": 0.3,
        },
    }
    try:
        env.prepare()
        env.start_web()
        world = env.register_agents(max(args.subscribers, args.idle))
        for phase in args.phases.split(","):
            print(f"phase {phase}...")
            results[phase] = {"live": phase_live, "storm": phase_storm, "idle": phase_idle}[phase](
                env, world, args
            )
            print(json.dumps(results[phase], indent=2))
    finally:
        env.stop_all()
    results["machine"]["load_average_at_end"] = os.getloadavg()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0


def profiled_server(argv: list[str]) -> None:
    """Run `python -m uvicorn …` (argv) under cProfile; the profile is written to
    streams-logs/streams.prof when the process is told to stop. (uvicorn re-raises the signal
    it caught after shutting down; the handler installed here is the one it re-raises to.)"""
    import cProfile
    import runpy

    profiler = cProfile.Profile()

    def dump_and_exit(signum, frame):
        profiler.disable()
        profiler.dump_stats(str(RESULTS / "streams-logs" / "streams.prof"))
        os._exit(0)

    signal.signal(signal.SIGTERM, dump_and_exit)
    signal.signal(signal.SIGINT, dump_and_exit)
    sys.argv = ["uvicorn", *argv[3:]]  # after "--profiled-server -m uvicorn"
    profiler.enable()
    runpy.run_module("uvicorn", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--profiled-server"]:
        profiled_server(sys.argv[1:])
    else:
        sys.exit(main())
