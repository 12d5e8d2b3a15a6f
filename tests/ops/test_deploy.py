"""docker-compose.yml, the Dockerfile and deploy/nginx.conf, checked without a Docker engine.

The compose file is parsed and its structure checked; every command it names is run locally:
click-based CLIs (granian, uvicorn, celery) with their options followed by `--help`, which
parses every option and fails on an unknown one; migrate with `--plan`; the web and stream
commands for real on a loopback port. nginx, when installed, serves the real config in front
of two fake upstreams to prove the routing and that streams are not buffered.
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

import testbed
from testbed import Process, http_status
from tests.ops.processes import BIN, REPO, base_env, free_port, running

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
APP_SERVICES = ["migrate", "web", "stream", "worker", "beat"]
LONG_RUNNING_APP = ["web", "stream", "worker", "beat"]
NGINX_CONF = (REPO / "deploy" / "nginx.conf").read_text()


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with the defaults, and $$ as a literal $."""
    value = re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1], m[2]), value)
    return value.replace("$$", "$")


# --- Structure -----------------------------------------------------------------------------


def test_the_topology_has_every_service():
    assert set(SERVICES) == {
        "postgres", "redis", "migrate", "web", "stream", "worker", "beat", "proxy"
    }  # fmt: skip


class StrictLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys; docker compose refuses the file instead."""

    def construct_mapping(self, node, deep=False):
        keys = [key.value for key, _ in node.value if key.tag != "tag:yaml.org,2002:merge"]
        duplicates = sorted({k for k in keys if keys.count(k) > 1})
        if duplicates:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate keys {duplicates}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


def test_the_compose_file_has_no_duplicate_keys():
    yaml.load((REPO / "docker-compose.yml").read_text(), Loader=StrictLoader)


def test_app_services_build_one_image_and_read_the_env_file():
    for name in APP_SERVICES:
        service = SERVICES[name]
        assert service["build"] == "." and service["image"] == "hikyaku:latest", name
        assert service["env_file"] == ".env", name
        assert service["environment"]["HIKYAKU_READ_DOT_ENV"] == "false", name
        multiproc = service["environment"]["PROMETHEUS_MULTIPROC_DIR"]
        assert any(mount.startswith(f"{multiproc}:") for mount in service["tmpfs"]), name
    assert SERVICES["postgres"]["env_file"] == ".env"
    assert SERVICES["postgres"]["image"].startswith("postgres:15")
    assert SERVICES["redis"]["image"].startswith("redis:")
    assert SERVICES["proxy"]["image"].startswith("nginx:")


def test_every_service_waits_for_healthy_or_finished_dependencies():
    for name in LONG_RUNNING_APP:
        assert SERVICES[name]["depends_on"] == {
            "postgres": {"condition": "service_healthy"},
            "redis": {"condition": "service_healthy"},
            "migrate": {"condition": "service_completed_successfully"},
        }, name
    assert SERVICES["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    assert SERVICES["migrate"]["restart"] == "no"
    assert SERVICES["proxy"]["depends_on"] == {
        "web": {"condition": "service_healthy"},
        "stream": {"condition": "service_healthy"},
    }
    for name, service in SERVICES.items():
        for dependency, rule in service.get("depends_on", {}).items():
            assert dependency in SERVICES, (name, dependency)
            wanted = (
                "service_completed_successfully" if dependency == "migrate" else "service_healthy"
            )
            assert rule["condition"] == wanted, (name, dependency)
            if wanted == "service_healthy":
                assert "healthcheck" in SERVICES[dependency], dependency


def test_every_long_running_service_but_beat_has_a_health_check():
    # Beat serves nothing and nothing depends on it, so it has nothing to be healthy for.
    for name in ["postgres", "redis", "web", "stream", "worker", "proxy"]:
        check = SERVICES[name]["healthcheck"]
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert check["interval"] and check["timeout"], name
    assert "healthcheck" not in SERVICES["beat"]


def test_web_and_stream_are_scalable_and_only_the_proxy_publishes_a_port():
    for name, service in SERVICES.items():
        assert "container_name" not in service, name
        if name != "proxy":
            assert "ports" not in service, name
    assert SERVICES["proxy"]["ports"] == ["${HIKYAKU_HTTP_PORT:-8000}:80"]
    assert "./deploy/nginx.conf:/etc/nginx/nginx.conf:ro" in SERVICES["proxy"]["volumes"]


def test_make_cluster_the_tests_and_the_benchmark_run_as_many_web_threads_as_compose(
    monkeypatch,
):
    """One number of request threads per web process: compose's, which `make cluster`, the
    reliability suite and `make bench` copy (testbed.WEB_THREADS)."""
    threads = SERVICES["web"]["environment"]["GRANIAN_BLOCKING_THREADS"]
    assert threads == str(testbed.WEB_THREADS)
    web = cluster_config(monkeypatch).commands()["web-1"]
    assert web[web.index("--blocking-threads") + 1] == threads


def test_make_cluster_runs_the_stream_command_of_compose(monkeypatch):
    """`make cluster` runs compose's stream command as it is, bound to its own address."""
    config = cluster_config(monkeypatch)
    ours = config.commands()["stream"]
    theirs = [interpolate(part) for part in SERVICES["stream"]["command"]]
    theirs[theirs.index("0.0.0.0")] = config.host
    theirs[theirs.index(SERVICES["stream"]["expose"][0])] = str(config.stream_port)
    assert [Path(ours[0]).name, *ours[1:]] == theirs


def cluster_config(monkeypatch):
    """scripts/cluster.py's configuration, from this environment."""
    spec = importlib.util.spec_from_file_location("cluster", REPO / "scripts" / "cluster.py")
    cluster = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "cluster", cluster)  # dataclasses look their module up
    spec.loader.exec_module(cluster)
    return cluster.Config.from_env()


def test_data_lives_in_named_volumes():
    assert "pgdata:/var/lib/postgresql/data" in SERVICES["postgres"]["volumes"]
    assert "redisdata:/data" in SERVICES["redis"]["volumes"]
    assert set(COMPOSE["volumes"]) == {"pgdata", "redisdata"}


def test_the_env_example_provides_what_compose_needs():
    example = {
        line.split("=", 1)[0]
        for line in (REPO / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    }
    for variable in ("DJANGO_SECRET_KEY", "DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL"):
        assert variable in example
    for variable in ("POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"):
        assert variable in example


def test_the_dockerfile_installs_from_the_lock_and_runs_unprivileged():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "--require-hashes -r requirements.lock" in dockerfile
    assert "collectstatic" in dockerfile
    assert re.search(r"^USER hikyaku$", dockerfile, re.M)
    cmd = json.loads(re.search(r"^CMD (.+)$", dockerfile, re.M)[1])
    assert cmd == SERVICES["web"]["command"]


# --- Every command exists here --------------------------------------------------------------


def local(argv: list[str]) -> list[str]:
    """The container's command with its executable taken from this environment."""
    executable = argv[0]
    if executable == "python":
        return [sys.executable, *argv[1:]]
    path = BIN / executable
    assert path.exists(), f"{executable} is not installed by requirements.lock"
    return [str(path), *argv[1:]]


def run_local(argv: list[str], env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=REPO, env=env or base_env(), capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", ["web", "stream", "worker", "beat"])
def test_every_option_of_every_server_command_is_known(name):
    argv = [interpolate(part) for part in SERVICES[name]["command"]]
    result = run_local(local(argv) + ["--help"])
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout


def test_an_unknown_option_would_have_been_caught():
    argv = local(["granian", "--interface", "wsgi", "--no-such-option"]) + ["--help"]
    assert run_local(argv).returncode != 0


def test_the_migrate_command_plans_against_a_fresh_database(tmp_path):
    argv = local(SERVICES["migrate"]["command"]) + ["--plan"]
    result = run_local(argv, base_env(DATABASE_URL=f"sqlite:///{tmp_path / 'plan.sqlite3'}"))
    assert result.returncode == 0, result.stderr
    assert "Planned operations" in result.stdout and "tenants.0001_initial" in result.stdout


def test_the_worker_health_check_command_exists():
    test = SERVICES["worker"]["healthcheck"]["test"]
    argv = shlex.split(interpolate(test[1]).replace("$HOSTNAME", "host"))
    result = run_local(local(argv) + ["--help"])
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["web", "stream"])
def test_the_python_health_checks_compile(name):
    test = SERVICES[name]["healthcheck"]["test"]
    assert test[:3] == ["CMD", "python", "-c"]
    compile(test[3], f"{name}-healthcheck", "exec")
    port = SERVICES[name]["expose"][0]
    assert f"127.0.0.1:{port}/readyz" in test[3]


@pytest.fixture(scope="module")
def migrated_env(tmp_path_factory):
    database = tmp_path_factory.mktemp("serve") / "db.sqlite3"
    env = base_env(DATABASE_URL=f"sqlite:///{database}")
    result = run_local(local(["python", "manage.py", "migrate", "--no-input", "-v0"]), env)
    assert result.returncode == 0, result.stderr
    return env


@contextmanager
def serving(name: str, env: dict[str, str], log: Path) -> Iterator[int]:
    """The compose service's own command on a free loopback port; yields the port."""
    port = free_port()
    argv = [interpolate(part) for part in SERVICES[name]["command"]]
    argv[argv.index("0.0.0.0")] = "127.0.0.1"
    argv[argv.index(SERVICES[name]["expose"][0])] = str(port)
    with running(local(argv), env=env, log=log, ready_url=f"http://127.0.0.1:{port}/readyz"):
        yield port


@pytest.mark.parametrize("name", ["web", "stream"])
def test_the_web_and_stream_commands_serve_the_broker(name, migrated_env, tmp_path):
    with serving(name, migrated_env, tmp_path / "server.log") as port:
        url = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{url}/readyz").json()["status"] == "ok"
        card = httpx.get(f"{url}/.well-known/agent-card.json")
        assert card.status_code == 200 and card.json()["name"] == "Hikyaku"


def test_the_uvicorn_servers_parse_http_with_httptools_on_uvloop(migrated_env, tmp_path):
    """`make run` and the stream tier leave uvicorn's `--http` and `--loop` at auto, which take
    httptools and uvloop when they are installed (pyproject.toml) and otherwise the
    pure-Python h11 and asyncio's own loop, at more CPU per request (docs/MEASUREMENTS.md,
    "uvicorn's HTTP parser and event loop"). The running server has both compiled modules
    loaded."""
    stream = " ".join(SERVICES["stream"]["command"])
    assert "--http" not in stream and "--loop" not in stream
    port = free_port()
    argv = testbed.uvicorn_argv(port)
    ready = f"http://127.0.0.1:{port}/readyz"
    with running(argv, env=migrated_env, log=tmp_path / "server.log", ready_url=ready) as server:
        assert httpx.get(ready).status_code == 200
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
    libraries = {line.split()[-1] for line in maps.splitlines() if line.endswith(".so")}
    assert any("/httptools/parser/parser." in path for path in libraries), sorted(libraries)
    assert any("/uvloop/loop." in path for path in libraries), sorted(libraries)


@pytest.mark.parametrize("module", ["hikyaku.wsgi", "hikyaku.asgi"])
def test_a_loaded_server_process_leaves_its_startup_objects_out_of_full_collections(
    module, migrated_env
):
    """The web and stream processes load Django and the apps (well over 100,000 objects) and
    then freeze them (hikyaku/heap.py): a full collection walks only what came later, instead
    of holding the GIL for tens of milliseconds (docs/MEASUREMENTS.md, Garbage collection)."""
    code = (
        f"import gc, importlib; importlib.import_module({module!r});"
        " print(gc.get_freeze_count(), len(gc.get_objects()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=migrated_env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    frozen, tracked = map(int, result.stdout.split())
    assert frozen > 100_000 and tracked < 1_000, (frozen, tracked)


FREEZE_SURVIVORS = """
import gc, weakref
from hikyaku.heap import FreezeSurvivors

class Stream:  # stands for a stream's long-lived objects: tracked, and weakly referable
    def __init__(self):
        self.state = {"open": True}

holds = [False]
freeze = FreezeSurvivors(lambda: holds[0])
freeze.install()
streams = [Stream() for _ in range(20_000)]
gc.collect()
before = gc.get_freeze_count()
holds[0] = True
gc.collect()
after = gc.get_freeze_count()
tracked = len(gc.get_objects())
gone = weakref.ref(streams[0])
del streams
freeze.remove()
print(before, after, tracked, gone() is None, freeze in gc.callbacks)
"""


def test_a_process_holding_many_streams_leaves_their_objects_out_of_later_collections():
    """A stream process with many streams freezes what survives each full collection
    (hikyaku/heap.py, FreezeSurvivors): the next one walks only what came after, instead of
    every stream's objects again, each time with every stream of the process stopped
    (docs/MEASUREMENTS.md, Garbage collection). Frozen objects are still freed when dropped."""
    result = subprocess.run(
        [sys.executable, "-c", FREEZE_SURVIVORS], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    before, after, tracked, freed, still_installed = result.stdout.split()
    assert int(before) == 0  # not while the condition is false
    assert int(after) >= 40_000  # the streams and their dicts
    assert int(tracked) < 1_000
    assert freed == "True" and still_installed == "False"


HUB_FREEZES = """
import asyncio, gc, django
django.setup()
from agents.auth import AgentIdentity
from agents.models import Agent
from messaging.a2a.wire import Dialect
from messaging.stream import hub as streams
from messaging.stream.feeds import InboxFeed
from tenants.models import Tenant

async def main():
    hub = streams.Hub()
    await hub.start()
    installed = any(callback is hub._freeze for callback in gc.callbacks)
    tenant = Tenant(slug="t")
    identity = AgentIdentity(tenant=tenant, agent=Agent(tenant=tenant), api_key=None,
                             credential_hash="h")
    subscriptions = [hub.subscribe(InboxFeed(identity, Dialect.V1_0, since=0))
                     for _ in range(streams.FREEZE_STREAMS - 1)]
    few = hub._freeze.holds()
    subscriptions.append(hub.subscribe(InboxFeed(identity, Dialect.V1_0, since=0)))
    many = hub._freeze.holds()
    hub.unsubscribe(subscriptions.pop())
    fewer = hub._freeze.holds()
    await hub.stop()
    removed = not any(callback is hub._freeze for callback in gc.callbacks)
    print(installed, few, many, fewer, removed)

asyncio.run(main())
"""


def test_the_stream_hub_freezes_survivors_only_while_it_holds_many_streams(migrated_env):
    """The freezing is on from FREEZE_STREAMS open streams, and only while the hub runs: a
    process with a few streams and Django views (the embedded default) keeps CPython's own
    collections, which free the cycles a view may leave."""
    result = subprocess.run(
        [sys.executable, "-c", HUB_FREEZES],
        cwd=REPO,
        env=migrated_env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    installed, few, many, fewer, removed = result.stdout.split()
    assert installed == "True" and removed == "True"
    assert (few, many, fewer) == ("False", "True", "False")


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_the_stream_service_listens_with_a_queue_for_a_reconnecting_crowd(migrated_env, tmp_path):
    """A restarted stream process's clients reconnect together; attempts beyond its listen
    queue are dropped and retried by TCP after 1, 3, 7 s (README, Scaling). The compose
    command asks for 16,384 (uvicorn's default is 2048) and the service's sysctls let the
    kernel grant it; here the kernel grants up to this machine's somaxconn."""
    command = SERVICES["stream"]["command"]
    backlog = int(command[command.index("--backlog") + 1])
    assert backlog >= 10_000
    assert SERVICES["stream"]["sysctls"]["net.core.somaxconn"] >= backlog
    somaxconn = int(Path("/proc/sys/net/core/somaxconn").read_text())
    with serving("stream", migrated_env, tmp_path / "stream.log") as port:
        listening = subprocess.run(
            ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True
        ).stdout.split()
    assert listening[0] == "LISTEN", listening
    assert int(listening[2]) == min(backlog, somaxconn)  # Send-Q of a listener: its queue


def upstream_keepalive_seconds() -> int:
    """How long nginx keeps an idle connection to a server: the same in every upstream."""
    blocks = re.findall(r"upstream \w+ \{([^}]*)\}", NGINX_CONF)
    timeouts = {re.search(r"keepalive_timeout (\d+)s;", block)[1] for block in blocks}
    assert len(blocks) == 2 and len(timeouts) == 1, blocks
    return int(timeouts.pop())


def test_the_servers_keep_idle_connections_longer_than_the_proxy(migrated_env, tmp_path):
    """nginx must be the one to close an idle connection to a server: a request it writes to a
    connection the server is closing fails, and nginx resends no POST, so a send would come
    back as a 502 (docs/ARCHITECTURE.md, Serving topology). Both servers, run with their
    compose commands, still answer on a connection left idle past nginx's timeout."""
    idle = upstream_keepalive_seconds() + 1
    with ExitStack() as stack:
        connections = {}
        for name in ("web", "stream"):
            port = stack.enter_context(serving(name, migrated_env, tmp_path / f"{name}.log"))
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            stack.callback(connection.close)
            connection.request("GET", "/readyz")
            assert connection.getresponse().read() and connection.sock is not None
            connections[name] = (connection, connection.sock)
        time.sleep(idle)
        for name, (connection, sock) in connections.items():
            try:
                connection.request("GET", "/readyz")  # on the same socket: no reconnect
                status = connection.getresponse().status
            except (http.client.RemoteDisconnected, ConnectionError) as error:
                raise AssertionError(f"{name} closed a connection idle for {idle} s") from error
            assert (status, connection.sock) == (200, sock), name


# --- nginx ------------------------------------------------------------------------------------


def test_nginx_conf_routes_the_stream_paths():
    for path in ("/api/v1/subscribe", "/ui/stream", "/mcp", "/a2a/", "text/event-stream"):
        assert path in NGINX_CONF, path
    assert "server web:8000" in NGINX_CONF and "server stream:8001" in NGINX_CONF
    assert NGINX_CONF.count("proxy_buffering off") >= 4
    assert SERVICES["web"]["expose"] == ["8000"] and SERVICES["stream"]["expose"] == ["8001"]


class Upstream(ThreadingHTTPServer):
    """A fake web or stream server: says who answered, and streams slowly when asked."""

    daemon_threads = True

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(("127.0.0.1", free_port()), UpstreamHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


class UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        if "handoff" in self.path and self.server.name in self.path.split("handoff=", 1)[-1]:
            # What a process answers a call it does not serve (messaging/stream/handoff.py).
            refusal = b'{"error": {"code": "STREAM_TIER_ONLY", "message": "not here"}}'
            self.send_response(421)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(refusal)))
            self.end_headers()
            self.wfile.write(refusal)
            return
        if "slow" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in (b"data: first\n\n", b"data: second\n\n"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(1.5)
            self.wfile.write(b"0\r\n\r\n")
            return
        status = int(self.path.split("status=", 1)[1][:3]) if "status=" in self.path else 200
        payload = json.dumps(
            {
                "upstream": self.server.name,
                "method": self.command,
                "path": self.path,
                "body": body.decode(),
                "forwarded_for": self.headers.get("X-Forwarded-For"),
                "request_id": self.headers.get("X-Request-Id"),
            }
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_DELETE = _answer


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    nginx = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if nginx is None:
        pytest.skip("nginx is not installed (apt-get install nginx)")
    tmp_path = tmp_path_factory.mktemp("nginx")
    web, stream = Upstream("web"), Upstream("stream")
    port = free_port()
    conf = (
        NGINX_CONF.replace("server web:8000;", f"server 127.0.0.1:{web.server_port};")
        .replace("server stream:8001;", f"server 127.0.0.1:{stream.server_port};")
        .replace("listen 80;", f"listen 127.0.0.1:{port};")
        .replace("access_log /dev/stdout;", f"access_log {tmp_path}/access.log;")
        .replace("error_log /dev/stderr warn;", f"error_log {tmp_path}/error.log warn;")
    )
    conf_path = tmp_path / "nginx.conf"
    conf_path.write_text(conf)
    globals_ = f"daemon off; pid {tmp_path}/nginx.pid;"
    check = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf_path), "-g", globals_],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    process = Process(
        [nginx, "-p", str(tmp_path), "-c", str(conf_path), "-g", globals_],
        log=tmp_path / "nginx.out",
        name="nginx",
    )
    try:
        process.start(lambda: http_status(f"http://127.0.0.1:{port}/healthz"), timeout=10)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()
        web.shutdown()
        stream.shutdown()


SSE = {"Accept": "text/event-stream"}
JSON = {"Accept": "application/json"}


@pytest.mark.parametrize(
    ("method", "path", "headers", "upstream"),
    [
        ("GET", "/api/v1/subscribe", SSE, "stream"),
        ("GET", "/api/v1/subscribe?since=42", {}, "stream"),
        ("GET", "/ui/stream", SSE, "stream"),
        ("GET", "/ui/stream/tenant-x", SSE, "stream"),
        ("GET", "/ui/t/acme/events/", SSE, "stream"),
        ("GET", "/ui/t/acme/agents/0b7e5c1e-8d1a-4c36-9a53-2f4a3c9d1e77/events/", {}, "stream"),
        ("GET", "/ui/t/acme/agents/", {}, "web"),
        ("GET", "/ui/t/acme/agents/0b7e5c1e-8d1a-4c36-9a53-2f4a3c9d1e77/inbox/", {}, "web"),
        ("POST", "/mcp", JSON, "stream"),
        ("GET", "/mcp", SSE, "stream"),
        ("DELETE", "/mcp", {}, "stream"),
        ("POST", "/", SSE, "stream"),
        ("POST", "/", {"Accept": "application/json, text/event-stream"}, "stream"),
        ("POST", "/a2a/", SSE, "stream"),
        ("POST", "/a2a/agents/0b7e/", SSE, "stream"),
        ("POST", "/", JSON, "web"),
        ("POST", "/a2a/", JSON, "web"),
        ("POST", "/a2a/agents/0b7e/", {}, "web"),
        ("GET", "/", SSE, "web"),
        ("GET", "/api/v1/agents", JSON, "web"),
        ("POST", "/api/v1/agents", JSON, "web"),
        ("GET", "/api/v1/subscribers", SSE, "web"),
        ("GET", "/ui/", {}, "web"),
        ("GET", "/admin/", {}, "web"),
        ("GET", "/static/app.css", {}, "web"),
        ("GET", "/.well-known/agent-card.json", {}, "web"),
        ("GET", "/a2a/agents/0b7e/.well-known/agent-card.json", SSE, "web"),
    ],
)
def test_nginx_sends_streams_to_stream_and_the_rest_to_web(proxy, method, path, headers, upstream):
    body = '{"jsonrpc": "2.0"}' if method == "POST" else None
    response = httpx.request(method, proxy + path, headers=headers, content=body, timeout=5)
    assert response.status_code == 200
    answer = response.json()
    assert answer["upstream"] == upstream
    assert (answer["method"], answer["path"]) == (method, path)
    assert answer["body"] == (body or "")
    assert answer["forwarded_for"] == "127.0.0.1"


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("POST", "/a2a/?handoff=web", JSON),
        ("POST", "/a2a/?handoff=web", {}),
        ("POST", "/?handoff=web", JSON),
        ("POST", "/a2a/agents/0b7e/?handoff=web", JSON),
        ("GET", "/api/v1/somewhere?handoff=web", {}),
    ],
)
def test_nginx_hands_what_web_answers_421_to_stream_unchanged(proxy, method, path, headers):
    # A streaming call without `Accept: text/event-stream`, or a blocking send: web answers
    # 421 at once and the stream tier gets the same request, body included.
    body = json.dumps({"jsonrpc": "2.0", "pad": "x" * 100_000}) if method == "POST" else None
    headers = {**headers, "Authorization": "Bearer hka_secret", "X-Request-Id": "hand-1"}
    response = httpx.request(method, proxy + path, headers=headers, content=body, timeout=5)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["upstream"] == "stream"
    assert (answer["method"], answer["path"]) == (method, path)
    assert answer["body"] == (body or "")  # larger than nginx's memory buffer: from its file
    assert answer["request_id"] == "hand-1"


def test_a_421_from_stream_reaches_the_client_and_other_errors_pass_through(proxy):
    # No loop: the stream tier's own 421 is the answer.
    response = httpx.post(proxy + "/a2a/?handoff=web,stream", content="{}", timeout=5)
    assert response.status_code == 421
    assert response.json()["error"]["code"] == "STREAM_TIER_ONLY"
    # Web's other errors are its answers, not hand-offs.
    for path in ("/a2a/?status=503", "/?status=429", "/api/v1/agents?status=404"):
        response = httpx.post(proxy + path, content="{}", timeout=5)
        assert response.status_code == int(path[-3:])
        assert response.json()["upstream"] == "web"


def test_nginx_passes_or_makes_a_request_id(proxy):
    given = httpx.get(proxy + "/healthz", headers={"X-Request-Id": "abc-1"}).json()
    assert given["request_id"] == "abc-1"
    made = httpx.get(proxy + "/healthz").json()
    assert re.fullmatch(r"[0-9a-f]{32}", made["request_id"])


def test_nginx_does_not_serve_metrics(proxy):
    response = httpx.get(proxy + "/metrics")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"


def first_chunk_after(url: str, **kwargs) -> float:
    started = time.monotonic()
    with httpx.stream(kwargs.pop("method", "GET"), url, timeout=10, **kwargs) as response:
        for _ in response.iter_raw():
            return time.monotonic() - started
    raise AssertionError("no body")


def test_stream_events_pass_through_the_proxy_as_they_happen(proxy):
    # The fake upstream sends its first event at once and the second 1.5 s later.
    assert first_chunk_after(proxy + "/api/v1/subscribe?slow") < 1.0
    assert first_chunk_after(proxy + "/ui/stream?slow") < 1.0
    assert first_chunk_after(proxy + "/mcp?slow", method="POST", headers=SSE, content="{}") < 1.0
    assert first_chunk_after(proxy + "/?slow", method="POST", headers=SSE, content="{}") < 1.0
    assert first_chunk_after(proxy + "/a2a/?slow", method="POST", headers=SSE, content="{}") < 1.0


def test_stream_routes_may_stay_open_for_an_hour():
    stream_blocks = re.findall(r"location [^{]*\{[^}]*proxy_pass http://stream;[^}]*\}", NGINX_CONF)
    assert len(stream_blocks) == 6
    for block in stream_blocks:
        assert "proxy_buffering off;" in block and "proxy_read_timeout 1h;" in block, block
