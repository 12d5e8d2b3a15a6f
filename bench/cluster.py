"""`make bench-cluster`: does a second web process raise durable send throughput here?

    python -m bench.cluster [--sends 3000] [--threads 16] [--concurrency 16] [--rounds 3]

The `make cluster` topology without a proxy: granian WSGI web processes (one worker each) on
their own ports, sharing Postgres and Redis. Each round measures the same unicast
`SendMessage` load (wrk + bench/lua/plan.lua, as `make bench`) against

- one web process with `--threads` blocking threads, `--concurrency` connections, and
- two web processes with half the threads each, and half the connections to each,

alternating the two so that both see the same background load. Per run it reports sends/s,
server CPU per send (each web process, the Postgres backends of the benchmark database, the
shared Postgres processes, redis-server), how much of a core each web process used, how busy
each core of the machine was, and how much of the machine other work took (other sessions'
processes share these cores). Every send must be stored exactly once. The load average at the
start and at the end is recorded. Results: bench/results/cluster.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

from . import load, phases
from .cpu import CpuMeter, core_busy_percent, per_core_ns
from .server import (
    BIN,
    ServerConfig,
    ServerProcess,
    environment,
    prepare_database,
    server_env,
)

RESULTS = Path(__file__).with_name("results")
COMPONENTS = ("postgres_backends", "postgres_shared", "redis")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.cluster", description=__doc__.split("\n")[0])
    p.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/hikyaku_bench_cluster"
    )
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/4")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--ports", default="8411,8412", help="the two web processes' ports")
    p.add_argument("--threads", type=int, default=16, help="blocking threads in total")
    p.add_argument("--concurrency", type=int, default=16, help="wrk connections in total")
    p.add_argument("--sends", type=int, default=3000, help="measured sends per run")
    p.add_argument("--warmup", type=int, default=200, help="unmeasured sends per run")
    p.add_argument("--rounds", type=int, default=3, help="runs of each topology, alternating")
    p.add_argument("--agents", type=int, default=20)
    p.add_argument("--payload-bytes", type=int, default=256)
    p.add_argument("--conn-max-age", type=int, default=600)
    p.add_argument("--output", type=Path, default=RESULTS / "cluster.json")
    return p.parse_args(argv)


def web_processes(
    cfg: ServerConfig, env: dict[str, str], ports: list[int], threads: int
) -> list[ServerProcess]:
    """`len(ports)` granian WSGI processes of one worker each, sharing `threads` threads."""
    webs = []
    for index, port in enumerate(ports, start=1):
        cmd = [
            str(BIN / "granian"), "--interface", "wsgi", "--host", cfg.host, "--port", str(port),
            "--workers", "1", "--blocking-threads", str(threads // len(ports)), "--no-ws",
            "--log-level", "warning", "hikyaku.wsgi:application",
        ]  # fmt: skip
        url = f"http://{cfg.host}:{port}"
        webs.append(ServerProcess(f"web-{index}", cmd, env, url, cfg.log_dir / f"web-{index}.log"))
    return webs


def stored(database_url: str, prefix: str) -> tuple[int, int]:
    """(tasks, distinct (sender, messageId)) stored for the sends whose id starts with prefix."""
    with psycopg.connect(database_url.replace("postgres://", "postgresql://", 1)) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT (sender_id, message_id)) FROM messaging_task"
            " WHERE message_id LIKE %s",
            (prefix + "%",),
        ).fetchone()
    return row[0], row[1]


def run_topology(
    args: argparse.Namespace,
    cfg: ServerConfig,
    env: dict[str, str],
    bench: phases.Bench,
    *,
    processes: int,
    label: str,
) -> dict[str, Any]:
    ports = [int(p) for p in args.ports.split(",")][:processes]
    webs = web_processes(cfg, env, ports, args.threads)
    for web in webs:
        web.start()
    try:
        bench.base_url = webs[0].url
        if not bench.agents:
            phases.register_agents(bench, args.agents)
        meter = CpuMeter(
            roots={web.name: web.pid for web in webs},
            database=cfg.database_name,
            count_reaped_postgres=False,
        )

        def targets(rows: list[load.PlanRow]) -> list[tuple[str, list[load.PlanRow]]]:
            return [(web.url, rows[i :: len(webs)]) for i, web in enumerate(webs)]

        per_process = args.concurrency // len(webs)
        warm = phases.send_rows(bench, args.warmup, f"warm-{label}")
        load.run_wrk_many(targets(warm), concurrency=per_process, expect='"result"')
        rows = phases.send_rows(bench, args.sends, label)
        before, cores_before, loadavg = meter.snapshot(), per_core_ns(), os.getloadavg()
        results = load.run_wrk_many(targets(rows), concurrency=per_process, expect='"result"')
        after, cores_after = meter.snapshot(), per_core_ns()
    finally:
        for web in webs:
            web.stop()
    cpu = meter.delta(before, after)
    ok = sum(len(r.ok) for r in results)
    seconds = max(r.finished for r in results) - min(r.started for r in results)
    client_ms = sum(r.client_cpu_ms for r in results)
    ours = sum(cpu[web.name] for web in webs) + sum(cpu[c] for c in COMPONENTS)
    capacity = cpu["machine_capacity"] or 1.0
    count, distinct = stored(cfg.database_url, f"{label}-{bench.run_id}-")
    return {
        "topology": f"{processes} web process{'es' if processes > 1 else ''} × "
        f"{args.threads // processes} threads, {per_process} connections each",
        "processes": processes,
        "sends": ok,
        "failed": sum(len(r.failed) for r in results),
        "seconds": round(seconds, 3),
        "sends_per_s": round(ok / seconds, 1),
        "cpu_ms_per_send": {
            **{web.name: round(cpu[web.name] / ok, 3) for web in webs},
            **{c: round(cpu[c] / ok, 3) for c in COMPONENTS},
            "total": round(ours / ok, 3),
            "load_generator": round(client_ms / ok, 3),
        },
        # A web process is one Python interpreter: near 1.0 core it is bound by its GIL.
        "web_cores_used": {web.name: round(cpu[web.name] / (seconds * 1000), 2) for web in webs},
        "cores_busy_percent": core_busy_percent(cores_before, cores_after),
        "machine": {
            "busy_percent": round(100 * cpu["machine_busy"] / capacity, 1),
            "ours_percent": round(100 * ours / capacity, 1),
            "load_generator_percent": round(100 * client_ms / capacity, 1),
            "other_work_percent": round(
                100 * max(0.0, cpu["machine_busy"] - ours - client_ms) / capacity, 1
            ),
            "postgres_foreign_ms": round(cpu["postgres_foreign"], 1),
        },
        "latency_ms_by_process": {
            web.name: {k: round(v, 1) for k, v in r.latency_ms.items() if k in ("p50", "p99")}
            for web, r in zip(webs, results, strict=True)
        },
        "loadavg_at_start": [round(v, 2) for v in loadavg],
        "stored": count,
        "stored_distinct": distinct,
    }


def summarize(runs: list[dict[str, Any]], cores: int) -> dict[str, Any]:
    def median(processes: int, pick) -> float:
        return round(statistics.median(pick(r) for r in runs if r["processes"] == processes), 3)

    out: dict[str, Any] = {}
    for processes in (1, 2):
        out[f"{processes}_process"] = {
            "sends_per_s": median(processes, lambda r: r["sends_per_s"]),
            "cpu_ms_per_send": median(processes, lambda r: r["cpu_ms_per_send"]["total"]),
            "web_cpu_ms_per_send": median(
                processes,
                lambda r: sum(v for k, v in r["cpu_ms_per_send"].items() if k.startswith("web")),
            ),
            "web_cores_used": median(processes, lambda r: sum(r["web_cores_used"].values())),
            "machine_busy_percent": median(processes, lambda r: r["machine"]["busy_percent"]),
            "ours_percent": median(processes, lambda r: r["machine"]["ours_percent"]),
            "other_work_percent": median(processes, lambda r: r["machine"]["other_work_percent"]),
        }
    one, two = out["1_process"], out["2_process"]
    out["speedup"] = round(two["sends_per_s"] / one["sends_per_s"], 2)
    # What the cores could do at the measured CPU per send: with the machine to ourselves, and
    # with what other work left us.
    capacity_ms = cores * 1000
    for figures in (one, two):
        figures["ceiling_sends_per_s_whole_machine"] = round(
            capacity_ms / figures["cpu_ms_per_send"], 1
        )
        figures["ceiling_sends_per_s_left_by_other_work"] = round(
            capacity_ms * (1 - figures["other_work_percent"] / 100) / figures["cpu_ms_per_send"], 1
        )
    out["verdict"] = verdict(out, cores)
    return out


def verdict(summary: dict[str, Any], cores: int) -> str:
    one, two = summary["1_process"], summary["2_process"]
    text = (
        f"1 web process: {one['sends_per_s']:.0f} sends/s at {one['cpu_ms_per_send']:.2f} ms "
        f"server CPU/send, the process using {one['web_cores_used']:.2f} core; "
        f"2 web processes: {two['sends_per_s']:.0f} sends/s at {two['cpu_ms_per_send']:.2f} "
        f"ms/send, using {two['web_cores_used']:.2f} cores together "
        f"(x{summary['speedup']:.2f}). The {cores} cores were {one['machine_busy_percent']:.0f}% "
        f"/ {two['machine_busy_percent']:.0f}% busy, other work taking "
        f"{one['other_work_percent']:.0f}% / {two['other_work_percent']:.0f}%."
    )
    text += (
        " One web process can never use more than one core (its threads share one interpreter "
        f"lock); it used {one['web_cores_used']:.2f}."
    )
    if summary["speedup"] >= 1.1:
        text += " A second web process raised send throughput."
    else:
        text += " A second web process did not raise send throughput."
    left = two["ceiling_sends_per_s_left_by_other_work"]
    return text + (
        f" With two, the bound is the machine's CPU: at {two['cpu_ms_per_send']:.2f} ms of "
        f"server CPU per send the {cores} cores carry at most "
        f"~{two['ceiling_sends_per_s_whole_machine']:.0f} sends/s with nothing else running "
        f"(~{left:.0f} with what other work left), and the run reached "
        f"{100 * two['sends_per_s'] / left:.0f}% of that."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not load.wrk_path():
        print("wrk is not installed: sudo apt-get install wrk", file=sys.stderr)
        return 2
    first_port = int(args.ports.split(",")[0])
    cfg = ServerConfig(
        database_url=args.database_url,
        redis_url=args.redis_url,
        host=args.host,
        port=first_port,
        stream_port=first_port,
        workers=1,
        threads=args.threads,
        conn_max_age=args.conn_max_age,
        log_dir=RESULTS / "logs",
    )
    env = server_env(cfg)
    loadavg_start = [round(v, 2) for v in os.getloadavg()]
    print(f"Preparing database {cfg.database_name} and Redis {cfg.redis_url} ...", flush=True)
    api_key = prepare_database(cfg, env)
    bench = phases.Bench(
        base_url=cfg.base_url,
        api_key=api_key,
        meter=CpuMeter(roots={}, database=cfg.database_name, count_reaped_postgres=False),
        concurrency=args.concurrency,
        generator="wrk",
        payload_bytes=args.payload_bytes,
    )
    runs = []
    for round_no in range(1, args.rounds + 1):
        for processes in (1, 2):
            label = f"cl{round_no}p{processes}"
            print(f"  round {round_no}, {processes} web process(es) ...", end="", flush=True)
            run = run_topology(args, cfg, env, bench, processes=processes, label=label)
            run["round"] = round_no
            runs.append(run)
            print(
                f" {run['sends_per_s']:.0f} sends/s, {run['cpu_ms_per_send']['total']:.2f} ms "
                f"CPU/send, web cores {run['web_cores_used']}, cores busy "
                f"{run['cores_busy_percent']}%",
                flush=True,
            )
    cores = os.cpu_count() or 1
    checks = {
        "sent": sum(r["sends"] for r in runs),
        "failed": sum(r["failed"] for r in runs),
        "lost": sum(r["sends"] - r["stored_distinct"] for r in runs),
        "duplicated": sum(r["stored"] - r["stored_distinct"] for r in runs),
    }
    summary = {
        "question": "Does a second web process raise durable send throughput on this machine?",
        "summary": summarize(runs, cores),
        "runs": runs,
        "checks": checks,
        "config": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "environment": {**environment(cfg), "loadavg_at_start": loadavg_start},
        "loadavg_at_end": [round(v, 2) for v in os.getloadavg()],
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print()
    print(summary["summary"]["verdict"])
    print(f"checks: {checks}")
    print(f"\nWrote {args.output}")
    return 1 if checks["lost"] or checks["duplicated"] or checks["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
