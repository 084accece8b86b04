"""Emulated links: rates, tbf shaping of the namespace pair, and runs across it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest

from bench import cli, records
from bench.cli.common import EXIT_BAD_INPUT
from bench.core import units
from bench.launch import netns
from bench.records import schema
from bench.records.types import Link, RunRecord
from bench.sweep import emulate
from bench.tables import frame
from tests.conftest import run_bench

# --- rates and records (no privileges needed) ------------------------------------------


def test_rates_parse_in_bits_per_second() -> None:
    assert units.parse_rate("200mbit") == 200_000_000
    assert units.parse_rate("1.5gbit") == 1_500_000_000
    assert units.parse_rate(" 25GBit ") == 25_000_000_000
    assert units.format_rate(25_000_000_000) == "25gbit"
    assert units.format_rate(1_500_000_000) == "1.5gbit"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10gb", "not understood"),  # bytes? bits? refused, not guessed
        ("10gbps", "not understood"),  # tc's bps is bytes per second
        ("200", "not understood"),
        ("fast", "not understood"),
        ("500kbit", "below 1mbit"),
    ],
)
def test_bad_rates_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(netns.LinkError, match=f"--emulate-link: rate '{text}'.*{message}"):
        units.parse_rate(text)


@pytest.mark.parametrize("rate", ["20mbit", "200mbit", "500mbit", "1gbit", "10gbit", "25gbit"])
def test_the_bucket_is_a_few_frames_of_an_mtu_that_grows_with_the_rate(rate: str) -> None:
    bps = units.parse_rate(rate)
    shaped = netns.link_shape(bps)
    assert netns.MIN_MTU <= shaped.mtu <= netns.MAX_MTU
    frames = 3 if shaped.mtu > netns.BIG_MTU else 2
    assert shaped.burst_bytes == frames * (shaped.mtu + netns.ETH_HEADER)
    # the head start a message gets: frames of PACKET_S, or of 1500 bytes at low rates
    frame_s = max(netns.PACKET_S, netns.MIN_MTU * 8 / bps) + netns.ETH_HEADER * 8 / bps
    assert shaped.burst_bytes * 8 / bps <= frames * frame_s * 1.0001
    # far below the 64 KiB + headers the bucket was before (1 ms at 500mbit)
    assert shaped.burst_bytes < 64 * 1024 or shaped.mtu * 8 / bps > 20e-6
    assert shaped.latency == "10ms"


def test_a_record_over_an_emulated_link_carries_its_rate() -> None:
    labels = {"link_rate_bps": 200_000_000}
    rec = records.new_record(
        {}, "ddp", 2, labels, {"name": "t", "argv": []}, link=netns.link_for(labels)
    )
    assert rec["link"]["rate_bps"] == 200_000_000 and rec["link"]["emulated"] is True
    assert rec["link"]["qdisc"] == "tbf" and rec["link"]["gso"] == "on"
    assert rec["link"]["mtu"] == 1600 and rec["link"]["burst_bytes"] == 2 * (1600 + 14)
    assert "link" not in records.new_record({}, "ddp", 2, {}, {"name": "t", "argv": []})
    assert schema.checker(Link).check(rec["link"], "link", schema.OK) is None
    # a record of the earlier shaping (no mtu, no gso) still loads
    old = {
        "rate_bps": RATE,
        "emulated": True,
        "qdisc": "tbf",
        "burst_bytes": 67584,
        "latency": "10ms",
    }
    assert schema.checker(Link).check(old, "link", schema.OK) is None
    bad = schema.checker(Link).check({"rate_bps": "1gbit"}, "link", schema.OK)
    assert bad and "link.rate_bps" in bad
    # compare names the link as part of the variant
    assert frame.link_suffix(rec) == "/200mbit" and frame.link_suffix(cast(RunRecord, {})) == ""


def test_bad_link_options_are_refused_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["--models", "mlp", "--engines", "ddp", "--no-compare", "--results", "/nonexistent"]
    for argv, message in [
        (["--emulate-link", "10gb"], "rate '10gb' is not understood"),
        (["--emulate-link", "1gbit", "--workers", "3"], "3 workers cannot be"),
        (["--emulate-link", "1gbit", "--hosts", "a:1,b:1"], "drop --hosts"),
    ]:
        assert cli.main(["run", *argv, *base]) == EXIT_BAD_INPUT
        assert message in capsys.readouterr().err
    assert cli.main(["collectives", "--emulate-link", "fast", "--engines", "ddp"]) == 2
    assert "rate 'fast' is not understood" in capsys.readouterr().err


def test_emulate_link_is_refused_by_name_without_root(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    argv = ["--emulate-link", "200mbit", "--engines", "ddp", "--results", str(tmp_path)]
    assert cli.main(["run", *argv, "--models", "mlp", "--no-compare"]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "--emulate-link cannot run here: creating network namespaces needs root" in err
    assert cli.main(["collectives", *argv]) == EXIT_BAD_INPUT
    assert "needs root" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())  # nothing ran, nothing recorded


def test_the_link_rate_is_part_of_a_cells_identity() -> None:
    from bench.contract.spec import RunSpec
    from bench.sweep import SweepConfig, plan

    def keys(rate: str) -> list[str]:
        config = SweepConfig.from_dict({"engines": ["ddp"], "models": ["mlp"], "repeats": 1,
                                        "emulate_link": rate})  # fmt: skip
        on_pair = emulate.on_pair(config, netns.planned(False, config.link_bps()))
        assert on_pair.workers == (2,) and on_pair.iface == netns.IFACE
        return [c.key("env") for c in plan(on_pair, RunSpec())]

    # a rerun at the same rate resumes; another rate is another cell
    assert keys("200mbit") == keys("0.2gbit") and not set(keys("200mbit")) & set(keys("1gbit"))
    # and so is the same rate shaped otherwise (records of the earlier, 66 KB bucket)
    before = keys("200mbit")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(netns, "BUCKET_FRAMES", 3)
        assert not set(keys("200mbit")) & set(before)


def test_dry_run_shows_the_namespace_hosts() -> None:
    proc = run_bench(
        "run", "--emulate-link", "1gbit", "--engines", "ddp", "--models", "mlp",
        "--repeats", "1", "--no-comm-cost", "--dry-run",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "over a 1gbit link" in proc.stdout and "--master-addr 10.214.0.1" in proc.stdout


# --- real namespaces ---------------------------------------------------------------------

WHY_NOT = netns.available(shaping=True)
needs_netns = pytest.mark.skipif(WHY_NOT is not None, reason=f"no shaped namespaces: {WHY_NOT}")
RATE = 200_000_000  # quick to fill, far below what a veth carries unshaped

_RECEIVER = """
import socket, sys, time
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
conn, _ = srv.accept()
got, first = 0, None
while chunk := conn.recv(1 << 20):
    first = first or time.perf_counter()
    got += len(chunk)
print(got, time.perf_counter() - first, flush=True)
"""


def _namespaces(pid: int) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [
        line.split()[0] for line in out.splitlines() if line.startswith(f"{netns.PREFIX}{pid}-")
    ]


def _tcp_rate(hosts: netns.TwoHosts, nbytes: int) -> float:
    """Bits/s of one TCP stream from the first namespace to the second (payload only)."""
    port = "5201"
    server = subprocess.Popen(
        ["ip", "netns", "exec", hosts.namespace(1), sys.executable, "-c", _RECEIVER,
         hosts.addresses[1], port],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        send = (
            f"import socket; s = socket.create_connection(({hosts.addresses[1]!r}, {port})); "
            f"s.sendall(bytes({nbytes})); s.close()"
        )
        subprocess.run(
            ["ip", "netns", "exec", hosts.namespace(0), sys.executable, "-c", send],
            check=True, timeout=120,
        )  # fmt: skip
        got, seconds = server.stdout.readline().split()
    finally:
        server.kill()
        server.wait()
    assert int(got) == nbytes
    return 8 * nbytes / float(seconds)


@needs_netns
def test_a_shaped_link_measures_its_rate_and_is_removed_after() -> None:
    with netns.two_hosts(rate_bps=RATE) as hosts:
        qdisc = subprocess.run(
            ["ip", "netns", "exec", hosts.namespace(1), "tc", "qdisc", "show", "dev", netns.IFACE],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        assert "tbf" in qdisc and "200Mbit" in qdisc
        # 10 MB: 0.4 s at the rate; the bucket (two 1614-byte frames) is far under 1% of it.
        # A loaded machine can only starve the two Python ends (a rate below the limit,
        # never above it), so up to three transfers and the best counts; every one must
        # stay under the limit.
        rates: list[float] = []
        while len(rates) < 3 and (not rates or max(rates) < 0.8 * RATE):
            rates.append(_tcp_rate(hosts, 10_000_000))
    shown = ", ".join(f"{r / 1e6:.0f}" for r in rates) + " Mbit/s"
    # TCP/IP headers take ~4% of what tbf counts; within 20% as the issue asks
    assert 0.8 * RATE <= max(rates) <= 1.2 * RATE, shown
    assert _namespaces(os.getpid()) == []


def _shown(namespace: str, *argv: str) -> Any:
    """The JSON that `ip -j ...` or `tc -j ...` prints inside `namespace`."""
    out = subprocess.run(
        ["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


@needs_netns
def test_each_end_is_shaped_as_the_record_says() -> None:
    recorded = netns.link_record(RATE)
    with netns.two_hosts(rate_bps=RATE) as hosts:
        for i in range(2):
            (qdisc,) = _shown(hosts.namespace(i), "tc", "-j", "qdisc", "show", "dev", netns.IFACE)
            (link,) = _shown(hosts.namespace(i), "ip", "-j", "-d", "link", "show", netns.IFACE)
            options = qdisc["options"]
            assert qdisc["kind"] == recorded["qdisc"] and options["rate"] * 8 == RATE
            # tc keeps the bucket as time, in whole microseconds: up to 1 us of the rate less
            assert 0 <= recorded["burst_bytes"] - options["burst"] <= RATE / 8 / 1e6
            assert options["burst"] >= link["mtu"] + netns.ETH_HEADER  # a frame fits
            assert options["lat"] == 10_000 and recorded["latency"] == "10ms"  # microseconds
            assert link["mtu"] == recorded["mtu"]
            # GSO stays on, and tbf cuts its packets into frames: they exceed the bucket
            assert recorded["gso"] == "on" and link["gso_max_size"] > options["burst"]
    assert _namespaces(os.getpid()) == []


_ANSWER_WHEN_ALL_IN = """
import socket, sys
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("listening", flush=True)
conn, _ = srv.accept()
for size in map(int, sys.argv[3:]):
    got = 0
    while got < size:
        got += len(conn.recv(size - got))
    conn.sendall(b"k")
"""

_SEND_AND_WAIT = """
import socket, sys, time
conn = socket.create_connection((sys.argv[1], int(sys.argv[2])))
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for size in map(int, sys.argv[3:]):
    time.sleep(0.2)  # an idle link: the bucket is full again
    start = time.perf_counter()
    conn.sendall(bytes(size))
    conn.recv(1)
    print(time.perf_counter() - start, flush=True)
"""


def _message_times(hosts: netns.TwoHosts, sizes: list[int]) -> list[float]:
    """Seconds from sending each message (on one connection, after an idle spell) to the
    receiver's one-byte answer once the whole message is in."""
    port, sizes_argv = "5202", [str(n) for n in sizes]
    server = subprocess.Popen(
        ["ip", "netns", "exec", hosts.namespace(1), sys.executable, "-c", _ANSWER_WHEN_ALL_IN,
         hosts.addresses[1], port, *sizes_argv],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        argv = [sys.executable, "-c", _SEND_AND_WAIT, hosts.addresses[1], port, *sizes_argv]
        sent = subprocess.run(
            ["ip", "netns", "exec", hosts.namespace(0), *argv],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
    finally:
        server.kill()
        server.wait()
    return [float(line) for line in sent.stdout.split()]


@needs_netns
def test_a_message_takes_its_bytes_over_the_rate_from_the_first_byte() -> None:
    """At 20mbit a 40 KB message takes 16 ms, a 200 KB one 82 ms. The bound is a lower one,
    which no machine's speed can break: only the bucket lets bytes pass faster than the
    rate, and a 66 KB bucket (the one before) would pass the first message at once and
    a third of the second."""
    rate = 20_000_000
    sizes = [40_960, 204_800]
    with netns.two_hosts(rate_bps=rate) as hosts:
        times = _message_times(hosts, sizes)
    for size, seconds in zip(sizes, times, strict=True):
        at_rate = size * 8 / rate
        assert seconds >= 0.85 * at_rate, (
            f"{size} B in {seconds * 1e3:.2f} ms, {at_rate * 1e3:.2f} ms at the rate"
        )


@needs_netns
def test_the_pair_is_removed_on_sigterm_and_after_sigkill() -> None:
    """SIGTERM reaches `bench` as an exception and the pair goes; a SIGKILLed run's pair is
    removed by the next one."""
    child = textwrap.dedent(
        """
        import time
        from bench.launch import netns
        from bench.cli.common import stop_on_signals
        with stop_on_signals(), netns.two_hosts(rate_bps=10**9):
            print("up", flush=True)
            time.sleep(60)
        """
    )
    for sig in (signal.SIGTERM, signal.SIGKILL):
        proc = subprocess.Popen(
            [sys.executable, "-c", child], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
        )  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up", proc.stderr
        assert len(_namespaces(proc.pid)) == 2 and len(_folders(proc.pid)) == 1
        proc.send_signal(sig)
        proc.wait(timeout=30)
        if sig == signal.SIGTERM:
            assert "Interrupted" in (proc.stderr.read() if proc.stderr else "")
            assert _namespaces(proc.pid) == [] and _folders(proc.pid) == []
        else:
            assert len(_namespaces(proc.pid)) == 2  # nothing could run on SIGKILL
            assert len(_folders(proc.pid)) == 1
            netns.remove_stale()
            assert _namespaces(proc.pid) == [] and _folders(proc.pid) == []


def _folders(pid: int) -> list[Path]:
    """The pair folders (sshd keys and log) made by process `pid`."""
    return list(Path(tempfile.gettempdir()).glob(f"{netns.TMP_PREFIX}{pid}-*"))


@pytest.mark.distributed
@needs_netns
def test_a_two_worker_cell_runs_across_a_shaped_link(tmp_path: Path) -> None:
    results = tmp_path / "res"
    proc = run_bench(
        "run", "--emulate-link", "200mbit", "--engines", "ddp", "--models", "mlp",
        "--repeats", "1", "--no-comm-cost", "--max-steps", "12", "--epochs", "1",
        "--timeout", "240", "--results", str(results),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (rec,) = records.load([results]).records
    assert rec["status"] == "ok" and rec["world_size"] == 2 and rec["nodes"] == 2
    assert rec["link"] == netns.link_record(RATE)
    assert rec["labels"]["link_rate_bps"] == RATE
    assert "ddp@2nodes/200mbit" in proc.stdout  # compare at the end of bench run
    assert _namespaces(os.getpid()) == []


@pytest.mark.distributed
@needs_netns
def test_collectives_measure_the_shaped_link(tmp_path: Path) -> None:
    proc = run_bench(
        "collectives", "--emulate-link", "200mbit", "--engines", "ddp", "--workers", "2",
        "--sizes", "1048576", "--iters", "5", "--timeout", "240", "--results", str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (rec,) = records.load([tmp_path / "collectives.jsonl"]).records
    assert rec["link"]["rate_bps"] == RATE and rec["status"] == "ok"
    busbw_bits = rec["results"][0]["busbw_gbps"] * 8e9
    # the link bounds what the collective gets (Gloo's own overheads lower it)
    assert 0.3 * RATE < busbw_bits <= 1.2 * RATE, json.dumps(rec["results"])
    assert "bus bandwidth / emulated link rate" in proc.stdout and "ddp np2 /200mbit" in proc.stdout


# A child that makes the pair (with an sshd) and is interrupted at one phase: its own
# SIGINT while shaping or while sshd starts, or the parent's SIGINT once the pair is in
# use (a process detached inside the second namespace, and an ssh session's command,
# which sshd starts outside any tree of ours).
_TEARDOWN_CHILD = """
import faulthandler, os, signal, subprocess, sys, time
from bench.cli.common import stop_on_signals
from bench.launch import netns

faulthandler.register(signal.SIGUSR1)  # the test asks where a slow teardown is

phase, marker = sys.argv[1], sys.argv[2]

def interrupt(*_: object, **__: object) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(30)  # the KeyboardInterrupt arrives here

if phase == "shaping":
    netns.shape = interrupt
elif phase == "sshd":
    netns._listening = interrupt
with stop_on_signals(), netns.two_hosts(with_sshd=True, rate_bps=10**9) as hosts:
    ns0, ns1 = hosts.namespace(0), hosts.namespace(1)
    subprocess.Popen(["ip", "netns", "exec", ns1, "setsid", "sleep", f"1000.{marker}"],
                     start_new_session=True)
    ssh = ["ip", "netns", "exec", ns0, "ssh", "-i", str(hosts.ssh_identity),
           "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
           "-o", "BatchMode=yes", hosts.addresses[1], f"sleep 1001.{marker}"]
    subprocess.Popen(ssh, start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    def remote_command_runs() -> bool:  # sshd's child, not the ssh client naming it
        out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        return f"\\nsleep 1001.{marker}" in out
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not remote_command_runs():
        time.sleep(0.2)
    print("up" if remote_command_runs() else "the ssh session's command never started", flush=True)
    time.sleep(120)
"""


def _stuck(child: subprocess.Popen[str]) -> str:
    """Where a child that would not end is: its Python stack, its and its children's
    states; then it is stopped (SIGTERM, which tears the pair down; SIGKILL after 30 s)."""
    child.send_signal(signal.SIGUSR1)  # faulthandler: every thread's stack to stderr
    states = subprocess.run(
        ["ps", "-o", "pid,ppid,stat,wchan:24,args", "--ppid", str(child.pid), "-p", str(child.pid)],
        capture_output=True,
        text=True,
    ).stdout
    time.sleep(1)
    child.terminate()
    try:
        child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    assert child.stderr is not None
    os.set_blocking(child.stderr.fileno(), False)  # a grandchild may hold the pipe open
    err = child.stderr.read() or ""
    return f"{states}\n--- stderr ---\n{err[-4000:]}"


def _left_behind(marker: str, pid: int) -> list[str]:
    """Processes, sshds, namespaces and veth ends of the child's pair still there."""
    procs = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    left = [line for line in procs.splitlines() if marker in line or "bench-netns-" in line]
    left += _namespaces(pid)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    left += [line for line in links.splitlines() if f"bv{pid % 1000000}" in line]
    return left


@needs_netns
@pytest.mark.skipif(netns.sshd_path() is None or shutil.which("ssh") is None, reason="no ssh/sshd")
@pytest.mark.parametrize("phase", ["shaping", "sshd", "in-use"])
def test_an_interrupt_at_any_phase_leaves_nothing_behind(phase: str) -> None:
    marker = uuid.uuid4().hex[:8]
    child = subprocess.Popen(
        [sys.executable, "-c", _TEARDOWN_CHILD, phase, str(int(marker, 16) % 10**6)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )  # fmt: skip
    if phase == "in-use":
        assert child.stdout is not None
        line = child.stdout.readline().strip()
        assert line == "up", f"{line}\n{_stuck(child)}"
        child.send_signal(signal.SIGINT)
    # Every phase of the teardown is bounded (3 s grace a round): a minute is a hang.
    try:
        child.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the interrupted child did not end within 60 s:\n{_stuck(child)}")
    err = child.stderr.read() if child.stderr else ""
    assert "KeyboardInterrupt" in err, err[-2000:]
    assert _left_behind(str(int(marker, 16) % 10**6), child.pid) == []
