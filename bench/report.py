"""The benchmark's results: bench/results/latest.json and the table printed at the end."""

from __future__ import annotations

from typing import Any

from .phases import PhaseResult

# The broker Hikyaku replaces (docs/MEASUREMENTS.md): not durable.
REPLACED_SEND_MS = 3.8
REPLACED_REDIS_MS = 0.45

TARGETS = {
    "send_cpu_ms_per_op": ("<=", 2.0),
    "poll_ack_cpu_ms_per_op": ("<=", 2.0),
    "broadcast_cpu_ms_per_delivery": ("<=", 0.3),
    "sends_per_s": (">=", 500),
    "lost": ("<=", 0),
    "duplicated": ("<=", 0),
    "cross_delivered": ("<=", 0),
}

COMPONENTS = ("web", "postgres_backends", "postgres_shared", "redis")


def _met(value: float | None, op: str, limit: float) -> bool | None:
    if value is None:
        return None
    return value <= limit if op == "<=" else value >= limit


def summarize(
    phases: dict[str, PhaseResult],
    checks: dict[str, Any] | None,
    environment: dict[str, Any],
    config: dict[str, Any],
) -> dict[str, Any]:
    def total_per_op(name: str) -> float | None:
        phase = phases.get(name)
        return round(phase.per_op["total"], 4) if phase and phase.ops else None

    send, floor = phases.get("send"), phases.get("floor")
    out: dict[str, Any] = {
        "send_cpu_ms_per_op": total_per_op("send"),
        "poll_ack_cpu_ms_per_op": total_per_op("poll_ack"),
        "broadcast_cpu_ms_per_delivery": total_per_op("broadcast"),
        "sends_per_s": round(send.ops / send.seconds, 1) if send else None,
        "send_latency_ms": {k: round(v, 2) for k, v in send.latency_ms.items()} if send else {},
        "floor_cpu_ms_per_op": total_per_op("floor"),
        "floor_per_s": round(floor.ops / floor.seconds, 1) if floor else None,
        "floor_latency_ms": {k: round(v, 2) for k, v in floor.latency_ms.items()} if floor else {},
        "lost": checks["lost"] if checks else None,
        "duplicated": checks["duplicated"] if checks else None,
        "cross_delivered": checks["cross_delivered"] if checks else None,
    }
    floor_ms = out["floor_cpu_ms_per_op"]
    out["ratio_to_floor"] = {
        key: round(out[key] / floor_ms, 2) if out[key] and floor_ms else None
        for key in ("send_cpu_ms_per_op", "poll_ack_cpu_ms_per_op", "broadcast_cpu_ms_per_delivery")
    }
    out["targets"] = {
        key: {"target": f"{op} {limit}", "met": _met(out[key], op, limit)}
        for key, (op, limit) in TARGETS.items()
    }
    out["replaced_broker_cpu_ms_per_send"] = {
        "app": REPLACED_SEND_MS,
        "redis": REPLACED_REDIS_MS,
        "total": REPLACED_SEND_MS + REPLACED_REDIS_MS,
        "durable": False,
    }
    out["phases"] = {name: phase.as_json() for name, phase in phases.items()}
    out["checks"] = checks
    out["config"] = config
    out["environment"] = environment
    return out


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def table(phases: dict[str, PhaseResult], summary: dict[str, Any]) -> str:
    rows = [
        ("floor: Django + 1 INSERT", "floor", "req"),
        ("unicast send", "send", "send"),
        ("poll+ack, per message", "poll_ack", "msg"),
        ("broadcast, per delivery", "broadcast", "dlv"),
        ("poll+ack of broadcasts", "broadcast_poll_ack", "msg"),
        ("register agent", "register", "agent"),
    ]
    head = (
        f"{'server CPU ms per op':<27}{'total':>7}{'web':>7}{'pg':>7}{'pg-sh':>7}{'redis':>7}"
        f"{'x floor':>8}{'ops':>6}{'ops/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'client':>8}"
    )
    lines = [head, "-" * len(head)]
    floor_ms = summary.get("floor_cpu_ms_per_op")
    for label, key, _unit in rows:
        phase = phases.get(key)
        if phase is None or not phase.ops:
            continue
        per = phase.per_op
        ratio = per["total"] / floor_ms if floor_ms else None
        lines.append(
            f"{label:<27}{_fmt(per['total']):>7}{_fmt(per.get('web')):>7}"
            f"{_fmt(per.get('postgres_backends')):>7}{_fmt(per.get('postgres_shared')):>7}"
            f"{_fmt(per.get('redis')):>7}{_fmt(ratio, 1) if ratio else '—':>8}{phase.ops:>6}"
            f"{phase.ops / phase.seconds:>8.0f}{_fmt(phase.latency_ms.get('p50'), 1):>8}"
            f"{_fmt(phase.latency_ms.get('p99'), 1):>8}"
            f"{_fmt(phase.client_cpu_ms / phase.ops):>8}"
        )
    lines.append(
        f"{'replaced broker (send)':<27}{REPLACED_SEND_MS + REPLACED_REDIS_MS:>7.2f}"
        f"{REPLACED_SEND_MS:>7.2f}{'—':>7}{'—':>7}{REPLACED_REDIS_MS:>7.2f}"
        f"{(REPLACED_SEND_MS + REPLACED_REDIS_MS) / floor_ms if floor_ms else 0:>8.1f}"
        "   (not durable)"
    )
    lines.append("")
    lines.append(
        "total = web + pg + pg-sh + redis: pg = Postgres backends of the bench database, pg-sh = "
        "postmaster, walwriter, checkpointer... ; client = load generator CPU ms per op."
    )
    if summary.get("checks"):
        c = summary["checks"]
        lines.append(
            f"checks: expected {c['expected']}, received {c['received']}, lost {c['lost']}, "
            f"duplicated {c['duplicated']}, cross-delivered {c['cross_delivered']}, unexpected "
            f"{c['unexpected']}, failed sends {c['failed_sends']}, failed acks {c['failed_acks']}"
        )
    queries = summary.get("queries_per_op") or {}
    if queries and "error" not in queries:
        lines.append(
            "SQL statements per request (incl. BEGIN/COMMIT) and in-process CPU ms: "
            + ", ".join(
                f"{name} {q['queries']} / {q['median_cpu_ms_in_process']:.2f}"
                for name, q in queries.items()
            )
        )
    lines.append("targets (issue 3):")
    for key, t in summary["targets"].items():
        mark = {True: "met", False: "MISSED", None: "not measured"}[t["met"]]
        lines.append(f"  {key:<32}{_fmt(summary.get(key)):>10}  {t['target']:<8} {mark}")
    return "\n".join(lines)
