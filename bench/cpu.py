"""Server CPU accounting from /proc, per component, between two snapshots.

A component is a set of processes: the web server's process tree, the stream server's tree, the
Postgres backends of the benchmark database, the shared Postgres processes (postmaster,
checkpointer, walwriter, ...), and redis-server. For every process we read the on-CPU time of
each of its threads from /proc/<pid>/task/<tid>/schedstat (nanoseconds, exact) and the
process totals from /proc/<pid>/stat (utime+stime, and cutime+cstime of reaped children, in
clock ticks of 10 ms). The delta of a process is the schedstat delta of its threads when no
thread vanished in between, and the coarser /proc/<pid>/stat delta otherwise. Processes that
exit during a phase are caught through their parent's cutime+cstime.

Postgres runs as a shared service on this machine, so backends of other databases (other
sessions' test runs) are reported as `postgres_foreign` and left out of the total. Exited
Postgres processes are only visible as the postmaster's reaped-children time, which mixes ours
and others'; it counts towards the total only when our server opens a connection per request.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
TICK_NS = 1_000_000_000 // CLOCK_TICKS


@dataclass
class ProcSample:
    pid: int
    ppid: int
    comm: str
    own_ns: int  # utime+stime from /proc/<pid>/stat, in ns (tick resolution)
    reaped_ns: int  # cutime+cstime: children that exited and were waited for
    threads: dict[int, int] = field(default_factory=dict)  # tid -> schedstat on-CPU ns
    start_ticks: int = 0  # start time since boot, to tell a recycled pid from the same process


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def read_proc(pid: int) -> ProcSample | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name is in parentheses and may contain spaces: split after the last ')'.
    lparen, rparen = stat.index("("), stat.rindex(")")
    comm = stat[lparen + 1 : rparen]
    rest = stat[rparen + 2 :].split()
    # rest[0] is field 3 (state); utime is field 14, start time field 22.
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(v) for v in rest[11:15])
    start_ticks = int(rest[19])
    threads: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        sched = _read(f"/proc/{pid}/task/{tid}/schedstat")
        if sched:
            threads[int(tid)] = int(sched.split()[0])
    return ProcSample(
        pid=pid,
        ppid=ppid,
        comm=comm,
        own_ns=(utime + stime) * TICK_NS,
        reaped_ns=(cutime + cstime) * TICK_NS,
        threads=threads,
        start_ticks=start_ticks,
    )


def proc_delta_ns(before: ProcSample | None, after: ProcSample) -> int:
    """CPU time `after` spent since `before` (or since it started, if it is new)."""
    if before is None or before.start_ticks != after.start_ticks:
        return sum(after.threads.values()) or after.own_ns
    if set(before.threads) <= set(after.threads):
        return sum(ns - before.threads.get(tid, 0) for tid, ns in after.threads.items())
    return after.own_ns - before.own_ns  # a thread exited: its schedstat is gone


def list_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    tree = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return tree


def _cmdline(pid: int) -> str:
    raw = _read(f"/proc/{pid}/cmdline") or ""
    return raw.replace("\0", " ").strip()


def classify_postgres(cmdline: str, database: str) -> str:
    """Map a postgres process title to `postgres_backends`, `postgres_foreign` or `_shared`.

    Titles look like `postgres: 15/main: <user> <db> <host>(<port>) <state>` for backends,
    `postgres: 15/main: checkpointer` for auxiliary processes, and the binary path for the
    postmaster.
    """
    if not cmdline.startswith("postgres:"):
        return "postgres_shared"  # the postmaster
    words = cmdline.split()
    # Skip "postgres:" and the optional "<cluster>:" prefix.
    words = words[2:] if len(words) > 1 and words[1].endswith(":") else words[1:]
    if len(words) >= 3 and words[0] == "autovacuum" and words[1] == "worker":
        return "postgres_backends" if words[2] == database else "postgres_foreign"
    if len(words) >= 3 and ("(" in words[2] or words[2] == "[local]"):
        return "postgres_backends" if words[1] == database else "postgres_foreign"
    return "postgres_shared"


@dataclass
class Snapshot:
    components: dict[str, dict[int, ProcSample]]
    machine_busy_ns: int
    machine_total_ns: int
    postgres_pids: set[int]


class CpuMeter:
    """Snapshots the CPU of the benchmark's server components.

    `roots` maps a component name (e.g. "web", "streams") to the pid of a process tree we
    started. Postgres and Redis processes are found by their command names; `redis_pids`
    narrows Redis to the given servers (a design's own redis-server, when several run), and a
    meter with `database=None` counts no Postgres at all (a design that does not use it).
    """

    def __init__(
        self,
        *,
        roots: dict[str, int],
        database: str | None,
        count_reaped_postgres: bool,
        redis_pids: set[int] | None = None,
    ):
        self.roots = dict(roots)
        self.database = database
        self.count_reaped_postgres = count_reaped_postgres
        self.redis_pids = redis_pids

    def snapshot(self) -> Snapshot:
        samples = {pid: s for pid in list_pids() if (s := read_proc(pid)) is not None}
        parents = {pid: s.ppid for pid, s in samples.items()}
        components: dict[str, dict[int, ProcSample]] = {}
        for name, root in self.roots.items():
            components[name] = {
                pid: samples[pid] for pid in descendants(root, parents) if pid in samples
            }
        for name in ("postgres_backends", "postgres_shared", "postgres_foreign", "redis"):
            components[name] = {}
        postgres_pids = {pid for pid, s in samples.items() if s.comm == "postgres"}
        for pid in postgres_pids if self.database is not None else ():
            kind = classify_postgres(_cmdline(pid), self.database)
            components[kind][pid] = samples[pid]
        for pid, s in samples.items():
            if s.comm == "redis-server" and (self.redis_pids is None or pid in self.redis_pids):
                components["redis"][pid] = s
        busy, total = _machine_ns()
        return Snapshot(
            components=components,
            machine_busy_ns=busy,
            machine_total_ns=total,
            postgres_pids=postgres_pids,
        )

    def delta(self, before: Snapshot, after: Snapshot) -> dict[str, float]:
        """Milliseconds of CPU per component between two snapshots, plus totals."""
        out: dict[str, float] = {}
        for name, procs in after.components.items():
            prior = before.components.get(name, {})
            ns = sum(proc_delta_ns(prior.get(pid), sample) for pid, sample in procs.items())
            if name in self.roots:
                # Children that exited inside the tree (e.g. a respawned worker).
                ns += sum(
                    sample.reaped_ns - prior[pid].reaped_ns
                    for pid, sample in procs.items()
                    if pid in prior and prior[pid].start_ticks == sample.start_ticks
                )
            out[name] = ns / 1e6
        reaped = 0
        for pid, sample in after.components["postgres_shared"].items():
            prior = before.components["postgres_shared"].get(pid)
            is_postmaster = sample.ppid not in after.postgres_pids
            if is_postmaster and prior is not None and prior.start_ticks == sample.start_ticks:
                reaped += sample.reaped_ns - prior.reaped_ns
        out["postgres_reaped"] = reaped / 1e6
        counted = [*self.roots, "postgres_backends", "postgres_shared", "redis"]
        if self.count_reaped_postgres:
            counted.append("postgres_reaped")
        out["total"] = sum(out[name] for name in counted)
        out["machine_busy"] = (after.machine_busy_ns - before.machine_busy_ns) / 1e6
        out["machine_capacity"] = (after.machine_total_ns - before.machine_total_ns) / 1e6
        return out


def _machine_ns() -> tuple[int, int]:
    """Busy and total CPU time of the whole machine from /proc/stat, in ns."""
    line = (_read("/proc/stat") or "cpu 0 0 0 0").splitlines()[0].split()
    values = [int(v) for v in line[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy * TICK_NS, (busy + idle + iowait) * TICK_NS


def self_cpu_ms() -> float:
    """CPU of this process (all threads) so far, in ms."""
    times = os.times()
    return (times.user + times.system) * 1000


def children_cpu_ms() -> float:
    """CPU of this process' terminated, waited-for children so far (e.g. wrk), in ms."""
    times = os.times()
    return (times.children_user + times.children_system) * 1000


def per_core_ns() -> list[tuple[int, int]]:
    """(busy, total) CPU time of each core so far, from the cpuN lines of /proc/stat, in ns."""
    cores = []
    for line in (_read("/proc/stat") or "").splitlines():
        name, *fields = line.split()
        if not (name.startswith("cpu") and name[3:].isdigit()):
            continue
        values = [int(v) for v in fields]
        user, nice, system, idle, iowait, irq, softirq, steal = (values + [0] * 8)[:8]
        busy = user + nice + system + irq + softirq + steal
        cores.append((busy * TICK_NS, (busy + idle + iowait) * TICK_NS))
    return cores


def core_busy_percent(before: list[tuple[int, int]], after: list[tuple[int, int]]) -> list[float]:
    """How busy each core was between two `per_core_ns` readings, in percent."""
    return [
        round(100 * (b1 - b0) / max(t1 - t0, 1), 1)
        for (b0, t0), (b1, t1) in zip(before, after, strict=True)
    ]
