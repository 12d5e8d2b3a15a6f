"""Loopback ports for the servers the tests and benchmarks start.

The kernel chooses: binding port 0 returns a port nothing holds, picked at random from the
ephemeral range, so two runs starting servers at the same moment (the SQLite and the Postgres
suite side by side, or several developers' suites on one machine) do not pick the same one —
which scanning a fixed range from its low end made likely. A port is only reserved while its
probe socket is open, so a server started on it may still lose it to someone else in between;
`Process` reports that as an early exit and `Server` then starts again on another port.
"""

from __future__ import annotations

import socket

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A port that nothing listens on or is bound to right now."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def free_ports(count: int, host: str = HOST) -> list[int]:
    """`count` distinct free ports (the probes stay bound until all are chosen)."""
    probes = []
    try:
        for _ in range(count):
            probe = socket.socket()
            probes.append(probe)
            probe.bind((host, 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def listening(port: int, host: str = HOST) -> bool:
    """Whether something accepts TCP connections on the port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
