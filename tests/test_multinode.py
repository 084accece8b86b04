"""Multi-node launches: the per-host plans, and real runs across two network namespaces."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from bench import engines, records
from bench.contract.spec import RunSpec
from bench.core.errors import SweepError
from bench.engines import Engine
from bench.launch import cluster as launch
from bench.launch import process
from bench.sweep import SweepConfig, run_sweep
from tests import netns
from tests import shared_sweep as shared
from tests.conftest import run_bench
from tests.shared_sweep import SharedSweep

ROOT = Path(__file__).resolve().parent.parent
TINY = RunSpec(model="mlp", max_steps=12, warmup_steps=2, epochs=1)


# --- plans (no privileges needed) ------------------------------------------------------


def test_hosts_parse_from_flags_and_hostfiles(tmp_path: Path) -> None:
    assert launch.parse_hosts("a:2, b:2") == (launch.Host("a", 2), launch.Host("b", 2))
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnode1 slots=4\nnode2:4  # second\n\nnode3\tslots = 4\n")
    assert launch.read_hostfile(hostfile) == tuple(launch.Host(f"node{i}", 4) for i in (1, 2, 3))
    hostfile.write_text("node1 slots=x\n")
    with pytest.raises(launch.LaunchError, match="'node1 slots=x' must look like HOST:SLOTS"):
        launch.read_hostfile(hostfile)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "HOST:SLOTS"),
        ("a:0", "SLOTS >= 1"),
        ("a:x", "HOST:SLOTS"),
        ("a:1,a:1", "names a host twice"),
        ("a;rm:1", "characters"),
        (",", "names no hosts"),
    ],
)
def test_bad_host_lists_are_refused_by_name(text: str, message: str) -> None:
    with pytest.raises(launch.LaunchError, match=message):
        launch.parse_hosts(text)


def test_workers_must_spread_evenly_over_the_hosts() -> None:
    cluster = launch.Cluster(launch.parse_hosts("a:2,b:2"))
    assert cluster.placement(4) == 2 and cluster.placement(2) == 1
    for workers in (1, 3, 6):
        with pytest.raises(launch.LaunchError, match="spread evenly over 2 hosts"):
            cluster.placement(workers)
    with pytest.raises(SweepError, match="spread evenly"):
        SweepConfig.from_dict({"hosts": "a:2,b:2", "workers": [3]})
    # without --workers a multi-node sweep uses every slot
    assert SweepConfig.from_dict({"hosts": "a:2,b:2"}).workers == (4,)


def test_remote_shell_needs_a_host_placeholder() -> None:
    with pytest.raises(launch.LaunchError, match=r"\{host\}"):
        launch.Cluster(launch.parse_hosts("a:1"), remote_shell="ssh")


def test_each_engine_gets_its_own_launchers_multi_node_form() -> None:
    cluster = launch.Cluster(launch.parse_hosts("n1:2,n2:2"), port=29555, iface="eth1")
    ddp = engines.build_launch(Engine.DDP, cluster, 4, ["--x"])
    assert [n.host.name for n in ddp] == ["n1", "n2"]
    for rank, node in enumerate(ddp):
        cmd = " ".join(node.command)
        assert "--nnodes 2" in cmd and f"--node-rank {rank}" in cmd
        assert "--nproc-per-node 2 --master-addr n1 --master-port 29555" in cmd
    paddle = engines.build_launch(Engine.PADDLE, cluster, 2, [])
    cmd = " ".join(paddle[1].command)
    assert "--nnodes 2 --rank 1 --nproc_per_node 1" in cmd
    assert "--master n1:29555 --host n2" in cmd
    (hvd,) = engines.build_launch(Engine.HOROVOD, cluster, 4, [])
    cmd = " ".join(hvd.command)
    assert "-np 4" in cmd and "-H n1:2,n2:2" in cmd and "--network-interfaces eth1" in cmd
    # the local argv reaches the host through the remote shell, in this repository,
    # with the interface set for torch's and Paddle's Gloo
    # (ssh gets the host after "--", so that no host name can read as an option)
    assert ddp[1].argv[:5] == ["ssh", "-o", "BatchMode=yes", "--", "n2"]
    assert ddp[1].argv[5].startswith(f"cd {ROOT} && exec env GLOO_SOCKET_IFNAME=eth1")


def test_dry_run_prints_every_hosts_command() -> None:
    proc = run_bench(
        "run",
        "--hosts", "n1:1,n2:1",
        "--engines", "ddp,paddle,horovod",
        "--models", "mlp",
        "--repeats", "1",
        "--no-comm-cost",
        "--dry-run",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("# on n1") == 3 and out.count("# on n2") == 2  # horovodrun starts n2
    assert "--node-rank 1" in out and "--rank 1" in out and "-H n1:1,n2:1" in out


def test_a_host_that_never_starts_fails_the_cell_without_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One host's launcher dies at once; the other, waiting at rendezvous, is stopped."""
    monkeypatch.setattr(process, "PEER_GRACE_S", 2.0)
    shell = tmp_path / "shell"
    # the first host runs its command (torchrun then waits for its peer at rendezvous);
    # the second cannot be reached
    shell.write_text('#!/bin/sh\n[ "$1" = 127.0.0.1 ] || { echo "no route to $1" >&2; exit 255; }\n'
                     'exec sh -c "$2"\n')  # fmt: skip
    shell.chmod(0o755)
    cfg = SweepConfig.from_dict(
        {
            "engines": ["ddp"],
            "models": ["mlp"],
            "repeats": 1,
            "comm_cost": False,
            "hosts": "127.0.0.1:1,127.0.0.9:1",
            "remote_shell": f"{shell} {{host}}",
            "timeout": 120,
        }
    )
    out = io.StringIO()
    (res,) = run_sweep(cfg, TINY, tmp_path / "res", out=out)
    assert res.status == records.Status.FAILED
    assert "host 1 (exit code 255)" in (res.error or "")
    assert "no route to 127.0.0.9" in (res.error or "")
    assert res.seconds < 60  # stopped after the grace period, not at the time-out
    (rec,) = records.load([tmp_path / "res"]).records
    assert (
        rec["status"] == records.Status.FAILED
        and rec["labels"]["hosts"] == "127.0.0.1:1,127.0.0.9:1"
    )


# --- real runs across two namespaces ---------------------------------------------------

WHY_NOT = netns.available()
needs_netns = pytest.mark.skipif(WHY_NOT is not None, reason=f"no network namespaces: {WHY_NOT}")


# the spec of the session's sweep, whose one-host runs these are compared with
COMMON = [*shared.SPEC, "--repeats", "1", "--no-comm-cost", "--no-compare"]


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory: pytest.TempPathFactory, shared_sweep: SharedSweep) -> Path:
    """Each engine's 2 workers on this host, the reference for the multi-node runs: the
    session's sweep's, in a folder of this module's own that the multi-node runs join."""
    return shared_sweep.copy_to(
        tmp_path_factory.mktemp("multinode") / "res",
        lambda r: (
            r["world_size"] == 2 and bool(r["spec"]["grad_sync"]) and not r.get("engine_options")
        ),
    )


def _run_on_two_hosts(engines: list[str], results: Path, with_sshd: bool) -> None:
    with netns.two_hosts(with_sshd=with_sshd) as hosts:
        argv = ["--hosts", hosts.hosts, "--iface", netns.IFACE]
        argv += ["--remote-shell", hosts.remote_shell, "--timeout", "180"]
        if hosts.ssh_identity:
            argv += ["--ssh-identity-file", hosts.ssh_identity]
        proc = run_bench(
            "run",
            *("--engines", ",".join(engines), *argv, *COMMON, "--results", str(results)),
            timeout=600,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _assert_same_as_one_host(results: Path, engine: str) -> None:
    recs = [r for r in records.load([results]).records if r["engine"] == engine]
    by_nodes = {r.get("nodes", 1): r for r in recs}
    assert sorted(by_nodes) == [1, 2], [r.get("nodes") for r in recs]
    for rec in recs:
        assert rec["status"] == "ok" and rec["world_size"] == 2, rec.get("error")
    one, two = by_nodes[1], by_nodes[2]
    # same math and the same reduction order on two ranks: the network changes nothing
    np.testing.assert_allclose(
        np.asarray(two["step_losses"], dtype=float),
        np.asarray(one["step_losses"], dtype=float),
        rtol=1e-6,
        err_msg=engine,
    )
    assert two["fingerprints"]["init_weights"] == one["fingerprints"]["init_weights"]
    assert two["fingerprints"]["data_order"] == one["fingerprints"]["data_order"]
    assert two["labels"]["hosts"].count(":1") == 2
    assert f"{engine}@2nodes" in run_bench("compare", str(results)).stdout


@pytest.mark.distributed
@needs_netns
def test_torchrun_and_paddle_across_two_namespace_hosts(local_runs: Path) -> None:
    _run_on_two_hosts(["ddp", "paddle"], local_runs, with_sshd=False)
    for engine in ("ddp", "paddle"):
        _assert_same_as_one_host(local_runs, engine)


@pytest.mark.distributed
@needs_netns
@pytest.mark.skipif(
    netns.sshd_path() is None,
    reason="horovodrun reaches other hosts by ssh and no sshd is installed "
    "(apt install openssh-server; .ci/run does)",
)
def test_horovodrun_across_two_namespace_hosts_over_ssh(local_runs: Path) -> None:
    _run_on_two_hosts(["horovod"], local_runs, with_sshd=True)
    _assert_same_as_one_host(local_runs, "horovod")
