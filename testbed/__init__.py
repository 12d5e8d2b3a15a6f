"""Real processes for the tests and the benchmarks: one way to start and stop them.

The test suite (tests/) and the benchmark harness (bench/) both run the broker the way it is
deployed, next to private servers they may crash: a uvicorn or granian process, a Celery worker,
a redis-server, a Postgres cluster of their own. This package is the one place that knows how
to choose a port, start such a process in its own process group with its output in a log file,
tell when it is ready, and stop it (and only it). It imports nothing of the product or of the
tests, so bench/ uses it without importing tests/ (docs/TESTING.md, "The process toolkit").

- `ports`: `free_port()` — a port the kernel chose, so concurrent runs never pick alike.
- `process`: `Process` (start, readiness, stop, SIGKILL of the whole group) and `wait_until`.
- `broker`: the commands of the broker's servers (uvicorn, granian, Celery) and `Server`;
  `WEB_THREADS`, the request threads of a production web process.
- `redis`: `RedisServer`, a private redis-server that may be stopped, killed and restarted.
- `postgres`: `PostgresCluster`, a private Postgres cluster that may be crashed and restarted;
  `recreate_database`, a scratch database dropped and made again on a running server;
  `terminate_backends`, connections of a running server cut as a restart would.
"""

from .broker import WEB_THREADS, Celery, Server, celery_argv, granian_argv, uvicorn_argv
from .ports import free_port, free_ports
from .postgres import PostgresCluster, recreate_database, terminate_backends
from .process import ROOT, Process, ProcessError, http_ok, http_status, wait_until
from .redis import RedisServer

__all__ = [
    "ROOT",
    "WEB_THREADS",
    "Celery",
    "PostgresCluster",
    "Process",
    "ProcessError",
    "RedisServer",
    "Server",
    "celery_argv",
    "free_port",
    "free_ports",
    "granian_argv",
    "http_ok",
    "http_status",
    "recreate_database",
    "terminate_backends",
    "uvicorn_argv",
    "wait_until",
]
