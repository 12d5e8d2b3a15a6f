"""Load generators: wrk replaying a request plan (preferred), or Python client processes.

A plan is a list of POSTs decided in advance (ids, bodies, credentials), so the generator does
no thinking under load and the checks know exactly what was sent. Both generators return the
same `LoadResult`: which plan ids succeeded, failed or ended unknown, the wall time from the
first request to the last response, latency percentiles, and the generator's own CPU.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .cpu import children_cpu_ms
from .http import Connection

LUA_SCRIPT = Path(__file__).with_name("lua") / "plan.lua"
WRK_MISSING = (
    "wrk was not found; falling back to Python client processes (each costs ~0.3 ms of CPU per "
    "request and competes with the server for the same 2 cores). Install it for the "
    "throughput figure: `sudo apt-get install wrk` (Debian/Ubuntu) or `brew install wrk`."
)


HEADER_SEPARATOR = "\x1f"  # between "Name: value" pairs in a plan line (never in a header)


@dataclass
class PlanRow:
    id: str
    path: str
    headers: dict[str, str]  # besides Content-Type, e.g. Authorization, A2A-Version, X-Agent-Id
    body: str  # compact JSON: no tabs or newlines

    def plan_line(self) -> str:
        headers = HEADER_SEPARATOR.join(f"{name}: {value}" for name, value in self.headers.items())
        return f"{self.id}\t{self.path}\t{headers}\t{self.body}\n"


@dataclass
class LoadResult:
    generator: str
    requests: int
    ok: list[str]
    failed: list[tuple[str, int, str]]  # (plan id, HTTP status, start of the body)
    unknown: list[str]  # requests whose outcome the generator could not learn
    started: float  # time.monotonic() of the first request
    finished: float  # time.monotonic() of the last response
    latency_ms: dict[str, float]
    client_cpu_ms: float
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return max(self.finished - self.started, 1e-9)

    @property
    def per_second(self) -> float:
        return len(self.ok) / self.seconds


def wrk_path() -> str | None:
    return shutil.which("wrk")


def run_plan(
    base_url: str,
    rows: list[PlanRow],
    *,
    concurrency: int,
    expect: str,
    generator: str = "auto",
    processes: int = 2,
    timeout_s: float = 600,
) -> LoadResult:
    """Send every row once at the given concurrency and wait for every response."""
    if generator == "auto":
        generator = "wrk" if wrk_path() else "python"
    if generator == "wrk":
        return _run_wrk(base_url, rows, concurrency=concurrency, expect=expect, timeout_s=timeout_s)
    return _run_python(base_url, rows, concurrency=concurrency, expect=expect, processes=processes)


def _split(rows: list[PlanRow], parts: int) -> list[list[PlanRow]]:
    parts = max(1, min(parts, len(rows)))
    return [rows[i::parts] for i in range(parts)]


def _run_wrk(
    base_url: str, rows: list[PlanRow], *, concurrency: int, expect: str, timeout_s: float
) -> LoadResult:
    return run_wrk_many(
        [(base_url, rows)], concurrency=concurrency, expect=expect, timeout_s=timeout_s
    )[0]


def run_wrk_many(
    targets: list[tuple[str, list[PlanRow]]],
    *,
    concurrency: int,
    expect: str,
    timeout_s: float = 600,
) -> list[LoadResult]:
    """One wrk process per (base URL, rows), all at once, each with `concurrency` connections:
    e.g. one per web process of a cluster that has no proxy in front. Returns one LoadResult
    per target; the generators' CPU is their total, split evenly between them."""
    runs: list[tuple[subprocess.Popen, Path, int]] = []
    cpu_before = children_cpu_ms()
    try:
        for base_url, rows in targets:
            shares = _split(rows, concurrency)
            workdir = Path(tempfile.mkdtemp(prefix="hikyaku-bench-wrk-"))
            for tid, share in enumerate(shares):
                with open(workdir / f"plan-{tid}.txt", "w") as fh:
                    for row in share:
                        fh.write(row.plan_line())
            threads = len(shares)
            env = {**os.environ, "BENCH_PLAN_DIR": str(workdir), "BENCH_EXPECT": expect}
            cmd = [
                wrk_path() or "wrk",
                f"-t{threads}",
                f"-c{threads}",
                f"-d{int(timeout_s)}s",
                "--timeout",
                "30s",
                "-s",
                str(LUA_SCRIPT),
                base_url,
            ]
            proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            runs.append((proc, workdir, threads))
        deadline = time.monotonic() + timeout_s
        for proc, workdir, threads in runs:
            while time.monotonic() < deadline and proc.poll() is None:
                if len(list(workdir.glob("report-*.txt"))) == threads:
                    break
                time.sleep(0.01)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # every thread is done: let wrk print and exit
        outputs = [proc.communicate(timeout=30)[0] for proc, _, _ in runs]
        client_cpu = (children_cpu_ms() - cpu_before) / len(runs)
        return [
            _parse_wrk(workdir, threads, client_cpu, output.decode(errors="replace"))
            for (_, workdir, threads), output in zip(runs, outputs, strict=True)
        ]
    finally:
        for proc, workdir, _ in runs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            shutil.rmtree(workdir, ignore_errors=True)


def _parse_wrk(workdir: Path, threads: int, client_cpu: float, output: str) -> LoadResult:
    ok: list[str] = []
    failed: list[tuple[str, int, str]] = []
    unknown: list[str] = []
    starts, ends = [], []
    plan_ids: list[str] = []
    for tid in range(threads):
        plan_ids = [line.split("\t", 1)[0] for line in open(workdir / f"plan-{tid}.txt")]
        report = workdir / f"report-{tid}.txt"
        if not report.exists():
            raise RuntimeError(f"wrk thread {tid} did not finish its plan. wrk said:\n{output}")
        bad: set[str] = set()
        for line in report.read_text().splitlines():
            key, _, value = line.partition("\t")
            if key == "started":
                starts.append(float(value))
            elif key == "finished":
                ends.append(float(value))
            elif key == "failed":
                plan_id, status, body = (value.split("\t", 2) + ["", ""])[:3]
                failed.append((plan_id, int(status), body))
                bad.add(plan_id)
        ok.extend(plan_id for plan_id in plan_ids if plan_id not in bad)
    summary = dict(
        line.split("\t", 1) for line in (workdir / "summary.txt").read_text().splitlines()
    )
    latency = {
        "p50": float(summary["latency_p50_us"]) / 1000,
        "p75": float(summary["latency_p75_us"]) / 1000,
        "p90": float(summary["latency_p90_us"]) / 1000,
        "p99": float(summary["latency_p99_us"]) / 1000,
        "p99.9": float(summary["latency_p99.9_us"]) / 1000,
        "max": float(summary["latency_max_us"]) / 1000,
        "mean": float(summary["latency_mean_us"]) / 1000,
    }
    errors = {k[len("errors_") :]: int(v) for k, v in summary.items() if k.startswith("errors_")}
    return LoadResult(
        generator="wrk",
        requests=int(summary["requests"]),
        ok=ok,
        failed=failed,
        unknown=unknown,
        started=min(starts),
        finished=max(ends),
        latency_ms=latency,
        client_cpu_ms=client_cpu,
        errors=errors,
    )


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    if not samples_ms:
        return {}
    ordered = sorted(samples_ms)

    def pick(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]

    return {
        "p50": pick(50),
        "p75": pick(75),
        "p90": pick(90),
        "p99": pick(99),
        "p99.9": pick(99.9),
        "max": ordered[-1],
        "mean": sum(ordered) / len(ordered),
    }


def _run_python(
    base_url: str, rows: list[PlanRow], *, concurrency: int, expect: str, processes: int
) -> LoadResult:
    """The fallback: `processes` client processes sharing `concurrency` connections."""
    shares = _split(rows, concurrency)
    per_process = [shares[i::processes] for i in range(min(processes, len(shares)))]
    ctx = multiprocessing.get_context("spawn")
    cpu_before = children_cpu_ms()
    with ctx.Pool(len(per_process)) as pool:
        outputs = pool.starmap(_python_worker, [(base_url, p, expect) for p in per_process])
    client_cpu = children_cpu_ms() - cpu_before
    ok, failed, latencies, starts, ends = [], [], [], [], []
    for out in outputs:
        ok += out["ok"]
        failed += out["failed"]
        latencies += out["latencies"]
        starts.append(out["started"])
        ends.append(out["finished"])
    return LoadResult(
        generator="python",
        requests=len(latencies),
        ok=ok,
        failed=failed,
        unknown=[],
        started=min(starts),
        finished=max(ends),
        latency_ms=percentiles(latencies),
        client_cpu_ms=client_cpu,
    )


def _python_worker(base_url: str, shares: list[list[PlanRow]], expect: str) -> dict:
    return asyncio.run(_python_connections(base_url, shares, expect))


async def _python_connections(base_url: str, shares: list[list[PlanRow]], expect: str) -> dict:
    parts = urlsplit(base_url)
    out: dict = {"ok": [], "failed": [], "latencies": []}
    needle = expect.encode()

    async def one_connection(share: list[PlanRow]) -> None:
        conn = Connection(parts.hostname or "127.0.0.1", parts.port or 80)
        for row in share:
            headers = {"Content-Type": "application/json", **row.headers}
            t0 = time.monotonic()
            resp = await conn.request("POST", row.path, headers=headers, body=row.body.encode())
            out["latencies"].append((time.monotonic() - t0) * 1000)
            if resp.status == 200 and needle in resp.body:
                out["ok"].append(row.id)
            else:
                out["failed"].append(
                    (row.id, resp.status, resp.body[:300].decode(errors="replace"))
                )
        await conn.close()

    out["started"] = time.monotonic()
    await asyncio.gather(*(one_connection(share) for share in shares))
    out["finished"] = time.monotonic()
    return out
