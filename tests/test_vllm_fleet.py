"""cader.dev.vllm_fleet on a CPU: each replica's OpenMP team, its wait policy and where it may run.

The replicas' engines run in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0), where vLLM ignores its own
VLLM_CPU_OMP_THREADS_BIND and keeps torch's default team, as wide as the machine and spinning between parallel
regions; two such replicas on two cores were several times slower than one (docs/serving.md, B17). The fleet now
gives each replica a sized, passive team and pins a team wider than one thread to its own cores. The last test starts
stand-in servers (a few lines of Python answering /health) to check what a replica process really gets.
"""

import json
import os
import sys
import textwrap

import pytest
from cader.dev.vllm_fleet import (
    free_port_pair,
    parse_cpus,
    pinned,
    replica_cpus,
    replica_placement,
    server_env,
    start_fleet,
)

# A stand-in for the vLLM interpreter: reports its CPU affinity and OpenMP settings, answers /health until SIGTERM.
FAKE_SERVER = textwrap.dedent("""\
    import http.server, json, os, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    print("REPORT " + json.dumps({"cpus": sorted(os.sched_getaffinity(0)),
                                  "omp_threads": os.environ.get("OMP_NUM_THREADS"),
                                  "omp_wait": os.environ.get("OMP_WAIT_POLICY")}), flush=True)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """)


@pytest.fixture
def fake_python(tmp_path):
    script = tmp_path / "server.py"
    script.write_text(FAKE_SERVER)
    wrapper = tmp_path / "python"  # called as `python -m vllm.entrypoints... --port N ...`, like the real one
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper)


def reports(fleet) -> list[dict]:
    out = []
    for log in fleet.logs:
        line = next(x for x in log.read_text().splitlines() if x.startswith("REPORT "))
        out.append(json.loads(line.removeprefix("REPORT ")))
    return out


def test_cpu_lists_parse_and_split_over_the_allowed_cpus():
    assert parse_cpus("0-3,6") == [0, 1, 2, 3, 6] and parse_cpus("1") == [1]
    with pytest.raises(ValueError, match="bad CPU list 'a-b'"):
        parse_cpus("a-b")
    # the ids are the CPUs this process may use (a container's share), not 0..n-1
    assert replica_cpus(2, allowed=[4, 5, 6, 7]) == [[4, 5], [6, 7]]
    assert replica_cpus(1, allowed=[2, 3]) == [[2, 3]]
    assert replica_cpus(3, allowed=[0, 1]) == [[0], [1], [0]]  # more replicas than cores: they share


def test_a_replica_gets_a_sized_passive_omp_team_whatever_the_caller_set(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "16")  # vLLM's CPU worker would keep the engine at the caller's value
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    env = server_env()
    assert env["OMP_NUM_THREADS"] == "1" and env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert env["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    assert server_env(4)["OMP_NUM_THREADS"] == "4"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # a caller's own wait policy is kept
    assert server_env()["OMP_WAIT_POLICY"] == "ACTIVE"
    with pytest.raises(ValueError, match="threads per replica must be >= 1"):
        server_env(0)


def test_only_teams_wider_than_one_thread_or_given_cores_are_pinned():
    assert replica_placement(2, threads=1, allowed=[0, 1]) == [(1, None), (1, None)]
    assert replica_placement(2, threads=2, allowed=[0, 1, 2, 3]) == [(2, [0, 1]), (2, [2, 3])]
    assert replica_placement(2, threads=4, allowed=[0, 1]) == [(1, [0]), (1, [1])]  # never more threads than CPUs
    assert replica_placement(1, threads=2, allowed=[0, 1]) == [(2, [0, 1])]
    assert replica_placement(3, threads=1, cores=["0-1", "2"]) == [(1, [0, 1]), (1, [2]), (1, [0, 1])]
    assert pinned(["py", "-m", "x"], None) == ["py", "-m", "x"]
    assert pinned(["py"], [0, 2])[1:] == ["--cpu-list", "0,2", "py"]


@pytest.mark.slow  # five stand-in servers, started and stopped: ~2-4 s
def test_start_fleet_gives_each_replica_its_team_and_cpus(fake_python, tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    allowed = sorted(os.sched_getaffinity(0))
    with start_fleet("m", replicas=2, port=free_port_pair(), python=fake_python, log_dir=tmp_path / "default",
                     timeout_s=60) as fleet:
        got = reports(fleet)
    # the default: one passive thread each, free to run on any allowed CPU
    assert got == [{"cpus": allowed, "omp_threads": "1", "omp_wait": "PASSIVE"}] * 2

    with start_fleet("m", replicas=2, port=free_port_pair(), python=fake_python, log_dir=tmp_path / "teams",
                     threads=8, timeout_s=60) as fleet:
        got = reports(fleet)
    shares = replica_cpus(2, allowed)  # wider teams: each pinned to its own share, as wide as it
    assert [(r["cpus"], r["omp_threads"]) for r in got] == [(s, str(len(s))) for s in shares]
    if len(allowed) >= 2:
        assert not set(got[0]["cpus"]) & set(got[1]["cpus"])

    with start_fleet("m", replicas=1, port=free_port_pair(), python=fake_python, log_dir=tmp_path / "one",
                     cores=[str(allowed[-1])], timeout_s=60) as fleet:
        assert reports(fleet)[0]["cpus"] == [allowed[-1]] and reports(fleet)[0]["omp_threads"] == "1"


def test_b17_counts_each_roles_cpu_inside_the_measured_window():
    from cader.scripts.bench.server_replicas import cpu_in_window, cpu_s_by_role

    series = [(t, {"client": c, "engine": e}) for t, c, e in [(0.0, 5.0, 1.0), (1.0, 5.5, 1.5), (2.0, 6.0, 2.5),
                                                              (3.0, 6.2, 3.5)]]
    # from the last sample at or before the start to the first at or after the end
    assert cpu_in_window(series, 1.2, 2.8) == {"cpu_s": {"client": 0.7, "engine": 2.0}, "seconds": 2.0,
                                               "busy_cores": 1.35}
    assert cpu_in_window(series, -1.0, 2.0) is None and cpu_in_window(series, 1.0, 9.0) is None
    # this test process is no fleet's: a child of it counts as the client
    import subprocess
    import sys

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(1, flush=True)\n" \
           "time.sleep(30)"
    with subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True) as child:
        child.stdout.readline()  # it has used 0.3 CPU-s
        used = cpu_s_by_role([])
        child.kill()
    assert used["client"] >= 0.3 and used["engine"] == 0.0


def test_a_port_in_use_is_refused_before_any_replica_starts(fake_python, tmp_path):
    import socket

    from cader.dev.vllm_fleet import port_free

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert not port_free(port)
        with pytest.raises(RuntimeError, match=rf"port\(s\) \[{port}\] already in use"):
            start_fleet("m", replicas=1, port=port, python=fake_python, log_dir=tmp_path / "logs")
        assert not (tmp_path / "logs").exists()  # nothing was started
    assert port_free(port)
