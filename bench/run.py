"""`make bench`: Hikyaku and the broker it replaces, side by side, in the same run.

    python -m bench.run [--rounds 3] [--sends 2000] [--concurrency 16] [--no-old-broker] ...

Three designs (bench/designs.py), all up for the whole run: Hikyaku as production runs it
(granian WSGI, Postgres, Redis), measured on the 0.3 path (API key + X-Agent-Id, what the old
broker speaks) and on the 1.0 path (agent tokens); the old broker (built from its archive at
run time); and `make run`'s embedded default (uvicorn, SQLite). Rounds alternate — in each,
Hikyaku's floor and both paths, then the old broker, then the embedded default — so that all
see the same background load. Per design and path (bench/phases.py): register agents, warm
up, unicast sends (wrk + bench/lua/plan.lua, concurrency 16), poll+ack, broadcasts and their
drain; then the checks (nothing lost, duplicated or cross-delivered). Writes
bench/results/latest.json (or --output), appends a line to history.jsonl beside it, and
prints the side-by-side table. See README, Benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import testbed

from . import a2a, load, phases, report
from .designs import Embedded, OldBroker, Production, find_old_broker
from .server import ROOT, ServerConfig, environment

RESULTS = Path(__file__).with_name("results")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/hikyaku_bench")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8401, help="Hikyaku's web (WSGI) server port")
    p.add_argument("--old-port", type=int, default=8403, help="the old broker's port")
    p.add_argument("--embedded-port", type=int, default=8404, help="the embedded default's port")
    p.add_argument("--workers", type=int, default=2, help="granian worker processes")
    p.add_argument(
        "--threads",
        type=int,
        default=testbed.WEB_THREADS,
        help="granian blocking threads per worker (default: production's, docker-compose.yml)",
    )
    p.add_argument(
        "--conn-max-age",
        type=int,
        default=600,
        help="DATABASE_CONN_MAX_AGE of the web server (0: one connection per request)",
    )
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of every design")
    p.add_argument("--agents", type=int, default=20)
    p.add_argument("--sends", type=int, default=2000)
    p.add_argument("--broadcasts", type=int, default=20)
    p.add_argument("--floor", type=int, default=2000, help="floor requests (0 to skip)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--payload-bytes", type=int, default=256, help="text size of each message")
    p.add_argument("--warmup", type=int, default=100, help="unmeasured requests per path")
    p.add_argument("--idle-seconds", type=float, default=2.0)
    p.add_argument(
        "--generator",
        choices=["auto", "wrk", "python"],
        default="auto",
        help="load generator for the floor and send phases (auto: wrk if installed)",
    )
    p.add_argument(
        "--no-old-broker",
        dest="old_broker",
        action="store_false",
        help="measure Hikyaku alone (also what happens when the old broker's archive is absent)",
    )
    p.add_argument(
        "--no-embedded",
        dest="embedded",
        action="store_false",
        help="skip `make run`'s embedded default (uvicorn, SQLite)",
    )
    p.add_argument(
        "--no-queries",
        dest="queries",
        action="store_false",
        help="skip counting the SQL queries of each operation (bench/queries.py)",
    )
    p.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    p.add_argument(
        "--profile-clock",
        action="store_true",
        help="with --profile: sample every thread on the clock (py-spy --idle), waits included, "
        "instead of CPU only; the summary goes to bench/results/profile-clock.json",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="one round, without the old broker: sample Hikyaku's servers with py-spy during "
        "send and poll+ack (inflates the CPU figures: the summary goes to "
        "bench/results/profile.json, the stacks to bench/results/profile/, not latest.json)",
    )
    return p.parse_args(argv)


class Runner:
    """Runs phases on one design and path, printing progress and noting the machine's load."""

    def __init__(self, args: argparse.Namespace, profilers: dict[str, object]):
        self.args, self.profilers = args, profilers

    def step(self, bench: phases.Bench, label: str, fn, *fn_args, profile: str = ""):
        print(f"    {label} ...", end="", flush=True)
        profiler = self.profilers.get(profile) if profile else None
        if profiler:
            profiler.start(f"{profile} {label}")
        loadavg = [round(v, 2) for v in os.getloadavg()]
        result = fn(bench, *fn_args)
        if profiler:
            profiler.stop()
        if result is not None:
            result.extra["loadavg_at_start"] = loadavg
        if result is not None and result.ops:
            print(
                f" {result.ops} ops in {result.seconds:.2f} s, "
                f"{result.per_op['total']:.3f} ms server CPU/op",
                flush=True,
            )
        else:
            print(" done", flush=True)
        return result

    def bench(self, design, dialect: a2a.Dialect, api_key: str = "") -> phases.Bench:
        return phases.Bench(
            base_url=design.base_url,
            api_key=api_key,
            meter=design.meter(),
            concurrency=self.args.concurrency,
            generator=self.args.generator,
            payload_bytes=self.args.payload_bytes,
            dialect=dialect,
        )

    def messaging(self, design, dialect: a2a.Dialect, *, broadcasts: bool = True) -> dict:
        """One design on one path: fresh tenant and agents, warm-up, then the measured phases."""
        args = self.args
        bench = self.bench(design, dialect, design.new_key())
        profile = f"{design.name}-{dialect.name}" if self.profilers else ""
        out: dict = {"loadavg_at_start": [round(v, 2) for v in os.getloadavg()]}
        results = {
            "register": self.step(bench, "register agents", phases.register_agents, args.agents)
        }
        self.step(bench, "warm-up sends", phases.send_unicasts, args.warmup, "warmup")
        self.step(bench, "warm-up drain", phases.drain, "warmup_drain")
        results["send"] = self.step(
            bench, "unicast sends", phases.send_unicasts, args.sends, profile=profile
        )
        results["poll_ack"] = self.step(
            bench, "poll+ack drain", phases.drain, "poll_ack", profile=profile
        )
        if broadcasts:
            results["broadcast"] = self.step(bench, "broadcasts", phases.broadcast, args.broadcasts)
            results["broadcast_poll_ack"] = self.step(
                bench, "drain broadcasts", phases.drain, "broadcast_poll_ack"
            )
        out["phases"] = results
        out["checks"] = bench.ledger.check()
        return out

    def floor(self, design: Production, first_round: bool) -> dict:
        bench = self.bench(design, a2a.V1)
        if first_round:
            self.step(bench, "warm-up floor", phases.warm_floor, self.args.warmup)
        results = {"idle": self.step(bench, "idle baseline", phases.idle, self.args.idle_seconds)}
        if self.args.floor:
            results["floor"] = self.step(bench, "floor", phases.floor, self.args.floor)
        return {"phases": results}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        args.rounds, args.old_broker = 1, False
    if args.generator != "python" and not load.wrk_path():
        if args.generator == "wrk":
            print("wrk is not installed: sudo apt-get install wrk", file=sys.stderr)
            return 2
        print(load.WRK_MISSING, file=sys.stderr)
    log_dir = RESULTS / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    cfg = ServerConfig(
        database_url=args.database_url,
        redis_url="",  # the bench's own redis-server (bench/designs.py)
        host=args.host,
        port=args.port,
        stream_port=args.port + 1,
        workers=args.workers,
        threads=args.threads,
        conn_max_age=args.conn_max_age,
        log_dir=log_dir,
    )
    production = Production(cfg, testbed.free_port())
    designs: list = [production]
    notes: list[str] = []
    old = None
    if args.old_broker:
        script = find_old_broker()
        if script is None:
            notes.append(
                "The old broker's archive (shared/tools/old-broker/ beside the checkout, or "
                "$OLD_BROKER_DIR) is not here: Hikyaku is measured alone, with no side-by-side "
                "ratios."
            )
        else:
            old_redis = testbed.free_port()
            old = OldBroker(script, args.host, args.old_port, old_redis, log_dir)
            designs.append(old)
    embedded = Embedded(args.host, args.embedded_port, log_dir) if args.embedded else None
    if embedded:
        designs.append(embedded)
    for note in notes:
        print(note, flush=True)

    profilers: dict[str, object] = {}
    rounds: list[dict] = []
    started: list = []
    queries: dict | None = None
    try:
        for design in designs:
            print(f"Starting {design.label} ...", flush=True)
            try:
                design.start()
            except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
                if design is not old:
                    raise
                notes.append(f"The old broker could not be built or started: {exc}")
                print(notes[-1], flush=True)
                old.stop()
                designs.remove(old)
                old = None
                continue
            started.append(design)
        if args.profile:
            from .profile import Profiler

            out_dir = RESULTS / "profile"
            clock = args.profile_clock
            profilers = {
                f"hikyaku-{d.name}": Profiler(production.web.pid, out_dir, clock=clock)
                for d in production.dialects
            }
            if embedded:
                profilers["embedded-1.0"] = Profiler(embedded.web.pid, out_dir, clock=clock)
        runner = Runner(args, profilers)
        for number in range(1, args.rounds + 1):
            print(f"Round {number} of {args.rounds}", flush=True)
            current: dict = {"round": number}
            print(f"  {production.label}: floor", flush=True)
            current["floor"] = runner.floor(production, number == 1)
            for dialect in production.dialects:
                print(f"  {production.label}, {dialect.name} path", flush=True)
                current[f"hikyaku-{dialect.name}"] = runner.messaging(production, dialect)
            if old:
                print(f"  {old.label}, 0.3", flush=True)
                current["old-0.3"] = runner.messaging(old, a2a.V03)
            if embedded:
                print(f"  {embedded.label}, 1.0 path", flush=True)
                current["embedded-1.0"] = runner.messaging(embedded, a2a.V1, broadcasts=False)
            rounds.append(current)
        if args.queries:
            print("  SQL queries per operation (in-process, bench/queries.py) ...", flush=True)
            queries = count_queries(production.env)
        env_info = environment(cfg)
    finally:
        for design in reversed(started):
            design.stop()
    summary = report.summarize(
        rounds,
        environment=env_info,
        config=vars_for_json(args),
        designs={d.name: {"label": d.label, **d.describe()} for d in designs},
        notes=notes,
    )
    summary["queries_per_op"] = queries
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    summary["loadavg_at_end"] = [round(v, 2) for v in os.getloadavg()]
    output = args.output
    if args.profile:
        output = RESULTS / ("profile-clock.json" if args.profile_clock else "profile.json")
        summary = {
            "profile": {name: p.summary() for name, p in profilers.items()},
            "note": "py-spy samples of the web processes during send and poll+ack; the CPU "
            "figures of a profiled run are inflated",
            **summary,
        }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if not args.profile:
        with open(output.parent / "history.jsonl", "a") as history:
            history.write(json.dumps(report.history_line(summary)) + "\n")
    print()
    print(report.table(summary))
    for profiler in profilers.values():
        print()
        print(profiler.report(top=15))
    print(f"\nWrote {output}")
    return 1 if report.checks_failed(summary) else 0


def count_queries(env: dict[str, str]) -> dict:
    """Run bench/queries.py in a Django process of its own (test client host allowed)."""
    env = {**env, "DJANGO_ALLOWED_HOSTS": "testserver", "HIKYAKU_LOG_LEVEL": "WARNING"}
    out = subprocess.run(
        [sys.executable, "-m", "bench.queries"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        return {"error": (out.stderr or out.stdout)[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def vars_for_json(args: argparse.Namespace) -> dict:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


if __name__ == "__main__":
    sys.exit(main())
