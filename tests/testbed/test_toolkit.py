"""The process toolkit (testbed/) that every live test and benchmark starts its servers with:
ports that concurrent runs do not share, failures that say why, and stops that leave nothing
behind."""

from __future__ import annotations

import os
import socket
import sys
import time

import pytest

from testbed import Process, ProcessError, RedisServer, Server, free_ports, http_status


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers signal 0 until its parent reaps it; it runs nothing.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports(5)
    assert len(set(ports)) == 5
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_process_that_exits_before_it_is_ready_says_so_with_its_log(tmp_path):
    process = Process(
        [sys.executable, "-c", "import sys; print('bad settings'); sys.exit(3)"],
        log=tmp_path / "out.log",
    )
    with pytest.raises(ProcessError, match=r"exited with 3 before it was ready") as error:
        process.start(lambda: False, timeout=10)
    assert "bad settings" in str(error.value)


def test_a_process_that_never_gets_ready_is_stopped(tmp_path):
    process = Process([sys.executable, "-c", "import time; time.sleep(60)"], log=tmp_path / "l")
    with pytest.raises(ProcessError, match="was not ready in 0.5s"):
        process.start(lambda: False, timeout=0.5)
    assert not process.alive


def test_stop_ends_the_whole_process_group(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(child_pid)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    process = Process([sys.executable, "-c", script], log=tmp_path / "out.log")
    process.start(child_pid.exists, timeout=10)
    pid = int(child_pid.read_text())
    process.stop()
    deadline = time.monotonic() + 5
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(pid), "the forked child outlived its stopped parent"


@pytest.mark.skipif(not RedisServer.available(), reason="needs redis-server on PATH")
def test_a_killed_redis_comes_back_on_the_same_port():
    import redis

    server = RedisServer().start()
    try:
        redis.Redis.from_url(server.url).set("k", "v")
        server.kill()
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(server.url, socket_connect_timeout=0.5).ping()
        server.start()
        assert redis.Redis.from_url(server.url).ping()
        assert redis.Redis.from_url(server.url).get("k") is None  # no persistence
    finally:
        server.stop()


def test_a_server_whose_port_was_taken_meanwhile_moves_to_another(tmp_path):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    env.pop("REDIS_URL", None)
    server = Server(env=env, log_dir=tmp_path)
    server._use_port(taken.getsockname()[1])  # as if someone bound it after we chose it
    try:
        server.start()
        assert server.port != taken.getsockname()[1]
        assert http_status(f"{server.url}/healthz") == 200
    finally:
        server.stop()
        taken.close()
