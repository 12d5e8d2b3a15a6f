"""`python -m bench.run --profile`: sample the web workers with py-spy during chosen phases.

py-spy is not a project dependency; install it into your virtualenv only
(`.venv/bin/pip install py-spy`). Sampling stops the workers briefly hundreds of times per
second, so a profiled run's CPU figures are inflated: they are written to
bench/results/profile/profile.json, never to latest.json. The collapsed stacks
(`<phase>.txt`, one "frame;frame;... count" line per distinct stack) load into speedscope or
any flame graph tool; the summary below ranks functions by the share of samples they appear in.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PROJECT_DIRS = ("messaging/", "agents/", "tenants/", "hikyaku/", "webui/", "bench/")


def py_spy() -> str:
    local = Path(sys.executable).with_name("py-spy")
    found = str(local) if local.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    return found


class Profiler:
    def __init__(self, root_pid: int, out_dir: Path, rate: int = 250, clock: bool = False):
        self.root_pid, self.out_dir, self.rate = root_pid, out_dir, rate
        # CPU (--gil: threads holding the interpreter lock) or the clock (--idle: every
        # thread, waiting included), which shows what a request waits for.
        self.mode = "--idle" if clock else "--gil"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.proc: subprocess.Popen | None = None
        self.files: dict[str, Path] = {}

    def start(self, label: str) -> None:
        name = label.replace(" ", "_").replace("+", "_") + (
            "_clock" if self.mode == "--idle" else ""
        )
        out = self.out_dir / f"{name}.txt"
        self.files[name] = out
        cmd = [py_spy(), "record", "--pid", str(self.root_pid), "--subprocesses", self.mode]
        cmd += ["--nolineno"]
        cmd += ["--rate", str(self.rate), "--format", "raw", "--output", str(out)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches to every worker before the load starts

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.proc = None

    def summary(self, top: int = 25) -> dict:
        return {name: analyse(path, top) for name, path in self.files.items() if path.exists()}

    def report(self, top: int = 20) -> str:
        lines = []
        for name, data in self.summary(top).items():
            lines.append(f"py-spy, {name}: {data['samples']} samples of the web workers")
            lines.append("  most inclusive time (share of samples a function is on the stack):")
            for frame, share in data["inclusive"][:top]:
                lines.append(f"    {share * 100:5.1f}%  {frame}")
            lines.append("  most self time (share of samples a function is the leaf):")
            for frame, share in data["self"][:top]:
                lines.append(f"    {share * 100:5.1f}%  {frame}")
        return "\n".join(lines)


def analyse(path: Path, top: int) -> dict:
    inclusive: Counter = Counter()
    own: Counter = Counter()
    project: Counter = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ")]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
            if any(d in frame for d in PROJECT_DIRS):
                project[frame] += count
    total = total or 1
    return {
        "samples": total,
        "inclusive": [(f, round(n / total, 4)) for f, n in inclusive.most_common(top)],
        "self": [(f, round(n / total, 4)) for f, n in own.most_common(top)],
        "project_inclusive": [(f, round(n / total, 4)) for f, n in project.most_common(top)],
    }
