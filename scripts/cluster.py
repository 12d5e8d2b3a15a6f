"""Run the production topology locally, without Docker: `make cluster` / `make cluster-stop`.

    python scripts/cluster.py start | stop | status

Starts, from the machine's Postgres and Redis: migrate (in the foreground), two granian WSGI
web processes, one uvicorn stream process, a Celery worker, Celery beat and nginx in front
of them with deploy/nginx.conf (its upstreams pointed at these ports: streams and every
long-held call to the stream process, the rest to the web processes); waits until each is
ready; writes `<name>.pid` and `<name>.log` per process to the run directory. `stop` sends
SIGTERM to each process group it started (SIGKILL after 15 s).

Environment (defaults in brackets):
  CLUSTER_DIR                 run directory [.run/cluster]
  CLUSTER_HOST                bind address [127.0.0.1]
  CLUSTER_PROXY_PORT          nginx, the address clients use [8000]; 0: no proxy
  CLUSTER_NGINX               the nginx executable [nginx on PATH, else /usr/sbin/nginx]
  CLUSTER_WEB_PORTS           comma-separated, one web process per port [8001,8002]
  CLUSTER_STREAM_PORT         [8010]
  CLUSTER_WEB_WORKERS         granian worker processes per web process [1]
  CLUSTER_WORKER_CONCURRENCY  Celery worker threads [8] (webhook deliveries wait on
                              receivers: a pool of threads, docs/WEBHOOKS.md)
  DATABASE_URL                [postgres://postgres@127.0.0.1:5432/hikyaku_cluster]
                              (created if missing)
  REDIS_URL                   [redis://127.0.0.1:6379/7]
  CELERY_BROKER_URL           [REDIS_URL]
  DJANGO_DEBUG                [false]; DJANGO_SECRET_KEY is generated once into the run
                              directory unless set; DJANGO_ALLOWED_HOSTS [127.0.0.1,localhost]
Any other Hikyaku variable (.env.example) is passed through. All processes share one
PROMETHEUS_MULTIPROC_DIR (emptied at start), so /metrics on any web port reports the cluster.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
STATE = "cluster.json"
NGINX_CONF = REPO / "deploy" / "nginx.conf"
# Request threads per web process: docker-compose.yml's GRANIAN_BLOCKING_THREADS
# (tests/ops/test_deploy.py checks that they agree).
WEB_THREADS = "4"


@dataclass
class Config:
    run_dir: Path
    host: str
    web_ports: list[int]
    stream_port: int
    web_workers: int
    worker_concurrency: int
    proxy_port: int  # 0: no proxy
    nginx: str | None
    env: dict[str, str]

    @classmethod
    def from_env(cls) -> Config:
        run_dir = Path(os.environ.get("CLUSTER_DIR", REPO / ".run" / "cluster")).resolve()
        env = dict(os.environ)
        env.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hikyaku_cluster")
        env.setdefault("REDIS_URL", "redis://127.0.0.1:6379/7")
        env.setdefault("CELERY_BROKER_URL", env["REDIS_URL"])
        env.setdefault("DJANGO_DEBUG", "false")
        env.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost")
        env["PROMETHEUS_MULTIPROC_DIR"] = str(run_dir / "metrics")
        env["HIKYAKU_READ_DOT_ENV"] = "false"
        return cls(
            run_dir=run_dir,
            host=os.environ.get("CLUSTER_HOST", "127.0.0.1"),
            web_ports=[
                int(port) for port in os.environ.get("CLUSTER_WEB_PORTS", "8001,8002").split(",")
            ],
            stream_port=int(os.environ.get("CLUSTER_STREAM_PORT", "8010")),
            web_workers=int(os.environ.get("CLUSTER_WEB_WORKERS", "1")),
            worker_concurrency=int(os.environ.get("CLUSTER_WORKER_CONCURRENCY", "8")),
            proxy_port=int(os.environ.get("CLUSTER_PROXY_PORT", "8000")),
            nginx=_find_nginx(os.environ.get("CLUSTER_NGINX")),
            env=env,
        )

    def commands(self) -> dict[str, list[str]]:
        """The same commands as docker-compose.yml, bound to local ports."""
        commands = {}
        for index, port in enumerate(self.web_ports, start=1):
            commands[f"web-{index}"] = [
                str(BIN / "granian"), "--interface", "wsgi", "--host", self.host,
                "--port", str(port), "--workers", str(self.web_workers),
                "--blocking-threads", WEB_THREADS, "--no-ws",
                "hikyaku.wsgi:application",
            ]  # fmt: skip
        commands["stream"] = [
            str(BIN / "uvicorn"), "hikyaku.asgi:application", "--host", self.host,
            "--port", str(self.stream_port), "--no-access-log",
            "--timeout-graceful-shutdown", "10", "--timeout-keep-alive", "30",
            "--backlog", "16384",
        ]  # fmt: skip
        commands["worker"] = [
            str(BIN / "celery"), "-A", "hikyaku", "worker", "--loglevel", "INFO",
            "--pool", "threads", "--concurrency", str(self.worker_concurrency),
            "--hostname", self.worker_name,
        ]  # fmt: skip
        commands["beat"] = [
            str(BIN / "celery"), "-A", "hikyaku", "beat", "--loglevel", "INFO",
            "--schedule", str(self.run_dir / "celerybeat-schedule"),
        ]  # fmt: skip
        if self.proxy_port:
            commands["proxy"] = [
                str(self.nginx), "-p", str(self.run_dir), "-c", str(self.nginx_conf),
                "-g", f"daemon off; pid {self.run_dir / 'nginx.pid'};",
            ]  # fmt: skip
        return commands

    @property
    def nginx_conf(self) -> Path:
        return self.run_dir / "nginx.conf"

    def render_nginx_conf(self) -> str:
        """deploy/nginx.conf with its upstreams, listen address and logs made local."""
        conf = NGINX_CONF.read_text()
        webs = "".join(f"server {self.host}:{port};\n        " for port in self.web_ports)
        local = (
            conf.replace("server web:8000;\n        ", webs)
            .replace("server stream:8001;", f"server {self.host}:{self.stream_port};")
            .replace("listen 80;", f"listen {self.host}:{self.proxy_port};")
        )
        if os.geteuid() != 0:
            # Unprivileged nginx cannot write the packaged temp directories; as root its
            # workers run as nobody, who may not enter the run directory, so root keeps them.
            temp = "".join(
                f"    {kind}_temp_path {self.run_dir / 'nginx-temp' / kind};\n"
                for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
            )
            local = local.replace("http {\n", "http {\n" + temp, 1)
        for upstream in ("server web:8000;", "server stream:8001;", "listen 80;"):
            if upstream in local:
                raise RuntimeError(f"deploy/nginx.conf: {upstream!r} was not made local")
        return local

    @property
    def worker_name(self) -> str:
        # Unique per cluster, so two clusters on one broker do not clash.
        return f"cluster-{self.stream_port}@%h"

    def ready_urls(self) -> dict[str, str]:
        urls = {
            f"web-{index}": f"http://{self.host}:{port}/readyz"
            for index, port in enumerate(self.web_ports, start=1)
        }
        urls["stream"] = f"http://{self.host}:{self.stream_port}/readyz"
        if self.proxy_port:
            urls["proxy"] = f"http://{self.host}:{self.proxy_port}/readyz"
        return urls


def _find_nginx(given: str | None) -> str | None:
    if given:
        return shutil.which(given)
    # Debian installs it in /usr/sbin, which is not on every user's PATH.
    return shutil.which("nginx") or shutil.which("/usr/sbin/nginx")


# --- Process bookkeeping ---------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    """The kernel's start time of `pid`, to tell our process from a later one with its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _load_state(config: Config) -> dict[str, dict]:
    try:
        return json.loads((config.run_dir / STATE).read_text())
    except (OSError, ValueError):
        return {}


def _save_state(config: Config, state: dict[str, dict]) -> None:
    (config.run_dir / STATE).write_text(json.dumps(state, indent=2))


def _alive(entry: dict) -> bool:
    return _start_time(entry["pid"]) == entry["start_time"]


def _running(config: Config) -> dict[str, dict]:
    return {name: entry for name, entry in _load_state(config).items() if _alive(entry)}


# --- Commands --------------------------------------------------------------------------------


def start(config: Config) -> int:
    if _running(config):
        print(f"A cluster is already running from {config.run_dir}; `make cluster-stop` first.")
        return 1
    config.run_dir.mkdir(parents=True, exist_ok=True)
    metrics_dir = Path(config.env["PROMETHEUS_MULTIPROC_DIR"])
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir()
    _ensure_secret_key(config)
    _ensure_database(config.env["DATABASE_URL"])
    if config.proxy_port:
        if config.nginx is None:
            print(
                "No nginx found (apt-get install nginx, or CLUSTER_NGINX=<path>). Clients need "
                "the proxy: the web processes hand streams and blocking calls to the stream "
                "process through it. Without one (CLUSTER_PROXY_PORT=0), send those to the "
                "stream port yourself."
            )
            return 1
        config.nginx_conf.write_text(config.render_nginx_conf())
        (config.run_dir / "nginx-temp").mkdir(exist_ok=True)

    print("Migrating...", flush=True)
    migrate = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=REPO, env=config.env
    )
    if migrate.returncode != 0:
        return migrate.returncode

    state: dict[str, dict] = {}
    commands = config.commands()
    # The proxy last, once its upstreams answer: nginx takes a web process that refuses a
    # connection out of rotation for 10 s (per worker), which would make a fresh cluster
    # answer 502 for a while.
    proxy = {"proxy": commands.pop("proxy")} if "proxy" in commands else {}
    for name, command in commands.items():
        _launch(config, state, name, command)
    problem = _wait_until_ready(config, state, set(commands))
    for name, command in proxy.items():
        if problem is None:
            _launch(config, state, name, command)
            problem = _wait_until_ready(config, state, {name})
    if problem:
        print(f"Cluster failed to start: {problem}", file=sys.stderr)
        for name in state:
            tail = (config.run_dir / f"{name}.log").read_text(errors="replace")[-1500:]
            print(f"--- {name}.log (tail) ---\n{tail}", file=sys.stderr)
        stop(config, quiet=True)
        return 1

    print("Hikyaku cluster is up:")
    if config.proxy_port:
        print(f"  proxy   http://{config.host}:{config.proxy_port}/   (nginx: clients go here)")
    for index, port in enumerate(config.web_ports, start=1):
        print(f"  web-{index}   http://{config.host}:{port}/   (granian WSGI)")
    print(
        f"  stream  http://{config.host}:{config.stream_port}/   "
        "(uvicorn ASGI: streams, blocking sends, MCP)"
    )
    print(f"  worker  {config.worker_name.replace('%h', os.uname().nodename)}   beat")
    print(f"  logs and pids in {config.run_dir}; metrics at any web port's /metrics")
    print("  stop with `make cluster-stop`")
    return 0


def _launch(config: Config, state: dict[str, dict], name: str, command: list[str]) -> None:
    with open(config.run_dir / f"{name}.log", "ab") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO,
            env=config.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop signals the whole tree
        )
    state[name] = {"pid": process.pid, "start_time": _start_time(process.pid)}
    (config.run_dir / f"{name}.pid").write_text(f"{process.pid}\n")
    _save_state(config, state)


def _wait_until_ready(
    config: Config, state: dict[str, dict], names: set[str], timeout: float = 90
) -> str | None:
    deadline = time.monotonic() + timeout
    pending = set(names)
    urls = config.ready_urls()
    markers = {"worker": " ready.", "beat": "beat: Starting"}
    while pending:
        for name in sorted(pending):
            if not _alive(state[name]):
                return f"{name} exited"
            if name in urls:
                try:
                    with urllib.request.urlopen(urls[name], timeout=2) as response:
                        if response.status == 200:
                            pending.discard(name)
                except (urllib.error.URLError, OSError):
                    pass
            else:
                log = (config.run_dir / f"{name}.log").read_text(errors="replace")
                if markers[name] in log:
                    pending.discard(name)
        if not pending:
            return None
        if time.monotonic() > deadline:
            return f"not ready after {timeout:.0f}s: {', '.join(sorted(pending))}"
        time.sleep(0.2)
    return None


def stop(config: Config, quiet: bool = False) -> int:
    state = _load_state(config)
    running = {name: entry for name, entry in state.items() if _alive(entry)}
    for entry in running.values():
        try:
            os.killpg(entry["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 15
    while any(_alive(entry) for entry in running.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for name, entry in running.items():
        if _alive(entry):
            print(f"{name} did not stop in 15 s; killing it", file=sys.stderr)
            try:
                os.killpg(entry["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
    for name in state:
        (config.run_dir / f"{name}.pid").unlink(missing_ok=True)
    (config.run_dir / STATE).unlink(missing_ok=True)
    if not quiet:
        print(f"Stopped {len(running)} process(es)." if running else "No cluster was running.")
    return 0


def status(config: Config) -> int:
    state = _load_state(config)
    if not state:
        print("No cluster state; not running.")
        return 1
    for name, entry in state.items():
        print(f"  {name:8} pid {entry['pid']:>7}  {'running' if _alive(entry) else 'DEAD'}")
    return 0 if all(_alive(entry) for entry in state.values()) else 1


# --- Setup -----------------------------------------------------------------------------------


def _ensure_secret_key(config: Config) -> None:
    if "DJANGO_SECRET_KEY" in config.env:
        return
    key_file = config.run_dir / "secret_key"
    if not key_file.exists():
        key_file.touch(mode=0o600)
        key_file.write_text(secrets.token_urlsafe(50))
    config.env["DJANGO_SECRET_KEY"] = key_file.read_text().strip()


def _ensure_database(url: str) -> None:
    """Create the Postgres database of `url` if it does not exist yet."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return
    import psycopg
    from psycopg import sql

    name = parts.path.lstrip("/")
    maintenance = urlunsplit(parts._replace(scheme="postgresql", path="/postgres"))
    with psycopg.connect(maintenance, autocommit=True) as connection:
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
        if exists.fetchone() is None:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"Created database {name}.")


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in {"start", "stop", "status"}:
        print(__doc__)
        return 2
    config = Config.from_env()
    return {"start": start, "stop": stop, "status": status}[argv[1]](config)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
