"""The engine registry: one entry per engine, and a fourth engine added from one file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import cli, engines, records
from bench.engines import Engine
from bench.launch import cluster as launch
from bench.tables import frame
from tests import engine_double
from tests.conftest import NO_EXTRA_WINDOWS


@pytest.fixture(scope="module")
def twin() -> Iterator[Engine]:
    engine = engine_double.register()
    try:
        yield engine
    finally:
        engines.unregister(engine)


def test_built_in_engines_come_from_the_registry() -> None:
    assert [e.value for e in Engine] == ["horovod", "ddp", "paddle"]
    assert Engine("ddp") is Engine.DDP and Engine.DDP == "ddp" and json.dumps(Engine.DDP) == '"ddp"'
    with pytest.raises(ValueError, match="'mxnet' is not a valid Engine"):
        Engine("mxnet")
    for engine in Engine:
        entry = engines.get(engine)
        assert entry.runner.is_file() and ":" in entry.adapter and entry.install_hint


def test_one_builder_per_engine_single_node_is_a_one_host_cluster() -> None:
    """Single- and multi-node commands come from the same builder, so they cannot drift:
    Paddle's --max_restart 0 (a failed worker fails the run) was multi-node only."""
    single = engines.local_argv(Engine.PADDLE, 2, ["--x"])
    cluster = launch.Cluster(launch.parse_hosts("n1:1,n2:1"))
    multi = engines.build_launch(Engine.PADDLE, cluster, 2, ["--x"])
    assert "--max_restart 0" in " ".join(single)
    assert all("--max_restart 0" in " ".join(n.command) for n in multi)
    ddp = engines.local_argv(Engine.DDP, 2, ["--x"])
    assert "--standalone --nnodes 1 --nproc-per-node 2" in " ".join(ddp)


def test_launcher_is_recognised_engine_first() -> None:
    env = {"OMPI_COMM_WORLD_RANK": "0"}
    assert engines.recognise_launcher(Engine.HOROVOD, env) == "mpirun"
    assert engines.recognise_launcher(Engine.DDP, {"TORCHELASTIC_RUN_ID": "x"}) == "torchrun"
    assert engines.recognise_launcher(Engine.PADDLE, {}) == "none"


def test_a_name_is_registered_once(twin: Engine) -> None:
    with pytest.raises(ValueError, match="already registered"):
        engine_double.register()


def test_fourth_engine_dry_run(
    twin: Engine, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["run", "--dry-run", "--engines", "twin", "--workers", "1,2", "--models", "mlp",
         "--repeats", "1", "--results", str(tmp_path)]
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    assert len(out) == 3  # np1, np2 and its compute-only twin
    assert all("torch.distributed.run" in line and "engine_double.py" in line for line in out)
    assert twin in list(Engine)


@pytest.mark.distributed
def test_fourth_engine_runs_a_real_cell(twin: Engine, tmp_path: Path) -> None:
    code = cli.main(
        ["run", "--engines", "twin", "--workers", "1", "--models", "mlp", "--repeats", "1",
         "--epochs", "1", "--max-steps", "20", *NO_EXTRA_WINDOWS, "--no-compare",
         "--results", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    (rec,) = records.load([records.results_file(tmp_path)]).records
    assert rec["status"] == "ok" and rec["engine"] == "twin"
    assert rec["launcher"]["name"] == "torchrun"
    assert frame.frame([rec])["engine"].iloc[0] == "twin"
