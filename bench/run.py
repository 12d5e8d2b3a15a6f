"""`make bench`: start the broker as in production, load it, and report CPU per operation.

    python -m bench.run [--sends 2000] [--concurrency 16] [--workers 2] [--threads 4] ...

Phases (bench/phases.py): register agents, warm up, idle baseline, the floor (Django + one
durable INSERT), unicast sends (wrk), poll+ack drain, broadcasts, and the drain of the
broadcasts; then the checks (nothing lost, duplicated or cross-delivered). Writes
bench/results/latest.json (or --output) and prints a table. See README, Benchmark.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from . import load, phases, report
from .cpu import CpuMeter
from .server import (
    ROOT,
    ServerConfig,
    environment,
    prepare_database,
    server_env,
    web_server,
)

RESULTS = Path(__file__).with_name("results")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    p.add_argument("--database-url", default="postgres://postgres@127.0.0.1:5432/hikyaku_bench")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/4")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8401, help="web (WSGI) server port")
    p.add_argument("--stream-port", type=int, default=8402, help="stream (ASGI) server port")
    p.add_argument("--workers", type=int, default=2, help="granian worker processes")
    p.add_argument(
        "--threads",
        type=int,
        default=4,
        help="granian blocking threads per worker (4 cost less CPU per request than 8 here)",
    )
    p.add_argument(
        "--conn-max-age",
        type=int,
        default=600,
        help="DATABASE_CONN_MAX_AGE of the web server (0: one connection per request)",
    )
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
        "--no-queries",
        dest="queries",
        action="store_false",
        help="skip counting the SQL queries of each operation (bench/queries.py)",
    )
    p.add_argument("--output", type=Path, default=RESULTS / "latest.json")
    p.add_argument(
        "--profile",
        action="store_true",
        help="sample the web workers with py-spy during send and poll+ack (inflates the CPU "
        "figures: results go to bench/results/profile/, not latest.json)",
    )
    return p.parse_args(argv)


def messaging_available(base_url: str) -> bool:
    """True once POST /a2a/ exists (the messaging issue); until then only the floor runs."""
    req = urllib.request.Request(base_url + "/a2a/", data=b"{}", method="POST")
    try:
        urllib.request.urlopen(req, timeout=5)
    except urllib.error.HTTPError as exc:
        return exc.code != 404
    except OSError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generator != "python" and not load.wrk_path():
        if args.generator == "wrk":
            print("wrk is not installed: sudo apt-get install wrk", file=sys.stderr)
            return 2
        print(load.WRK_MISSING, file=sys.stderr)
    cfg = ServerConfig(
        database_url=args.database_url,
        redis_url=args.redis_url,
        host=args.host,
        port=args.port,
        stream_port=args.stream_port,
        workers=args.workers,
        threads=args.threads,
        conn_max_age=args.conn_max_age,
        log_dir=RESULTS / "logs",
    )
    env = server_env(cfg)
    print(f"Preparing database {cfg.database_name} and Redis {cfg.redis_url} ...", flush=True)
    api_key = prepare_database(cfg, env)
    web = web_server(cfg, env)
    print(f"Starting {' '.join(web.cmd[:1] + web.cmd[1:-1])} ...", flush=True)
    web.start()
    profiler = None
    try:
        meter = CpuMeter(
            roots={"web": web.pid},
            database=cfg.database_name,
            count_reaped_postgres=cfg.conn_max_age == 0,
        )
        bench = phases.Bench(
            base_url=cfg.base_url,
            api_key=api_key,
            meter=meter,
            concurrency=args.concurrency,
            generator=args.generator,
            payload_bytes=args.payload_bytes,
        )
        if args.profile:
            from .profile import Profiler

            profiler = Profiler(web.pid, RESULTS / "profile")
        results: dict[str, phases.PhaseResult] = {}
        with_messaging = messaging_available(cfg.base_url)

        def step(label: str, fn, *fn_args, profile: bool = False, **fn_kwargs):
            print(f"  {label} ...", end="", flush=True)
            if profile and profiler:
                profiler.start(label)
            result = fn(bench, *fn_args, **fn_kwargs)
            if profile and profiler:
                profiler.stop()
            if result is not None and result.ops:
                print(
                    f" {result.ops} ops in {result.seconds:.2f} s, "
                    f"{result.per_op['total']:.3f} ms server CPU/op",
                    flush=True,
                )
            else:
                print(" done", flush=True)
            return result

        # Warm-up: first requests import modules and open connections in every worker.
        if args.floor:
            step("warm-up floor", phases.warm_floor, args.warmup)
        if with_messaging:
            results["register"] = step("register agents", phases.register_agents, args.agents)
            step("warm-up sends", phases.send_unicasts, args.warmup, "warmup")
            step("warm-up drain", phases.drain, "warmup_drain")
        else:
            print("  POST /a2a/ is not there yet (messaging issue): measuring the floor only.")
        results["idle"] = step("idle baseline", phases.idle, args.idle_seconds)
        if args.floor:
            results["floor"] = step("floor", phases.floor, args.floor)
        if with_messaging:
            results["send"] = step("unicast sends", phases.send_unicasts, args.sends, profile=True)
            results["poll_ack"] = step("poll+ack drain", phases.drain, "poll_ack", profile=True)
            results["broadcast"] = step("broadcasts", phases.broadcast, args.broadcasts)
            results["broadcast_poll_ack"] = step(
                "drain broadcasts", phases.drain, "broadcast_poll_ack"
            )
        checks = bench.ledger.check() if with_messaging else None
        summary = report.summarize(results, checks, environment(cfg), vars_for_json(args))
        if with_messaging and args.queries:
            print("  SQL queries per operation (in-process, bench/queries.py) ...", flush=True)
            summary["queries_per_op"] = count_queries(env)
    finally:
        web.stop()
    output = args.output
    if args.profile:
        output = RESULTS / "profile" / "profile.json"
        summary["profile"] = profiler.summary() if profiler else None
    output.parent.mkdir(parents=True, exist_ok=True)
    summary["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    output.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print()
    print(report.table(results, summary))
    if args.profile and profiler:
        print()
        print(profiler.report())
    print(f"\nWrote {output}")
    failed_checks = checks and (checks["lost"] or checks["duplicated"] or checks["cross_delivered"])
    return 1 if failed_checks else 0


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
