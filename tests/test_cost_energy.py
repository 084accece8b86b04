"""Cost and energy: money per million samples and to the target accuracy, energy where a
counter reports it ("not measured" otherwise, never zero)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import cli, records
from bench.cli.common import EXIT_BAD_INPUT
from bench.measure import energy
from bench.tables import cost
from bench.tables.frame import frame

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def _package(root: Path, name: str, uj: int, wrap: int = 10**9) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "energy_uj").write_text(f"{uj}\n")
    (d / "max_energy_range_uj").write_text(f"{wrap}\n")
    return d


def test_rapl_packages_are_read_once_with_wraparound_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(energy.ROOT_VARIABLE, str(tmp_path))
    p0 = _package(tmp_path, "intel-rapl:0", 5_000_000)
    p1 = _package(tmp_path, "intel-rapl:1", 999_000_000)
    _package(tmp_path, "intel-rapl:0:0", 1)  # a sub-domain of package 0: not counted again
    meter = energy.Meter(packages=True)
    meter.start()
    (p0 / "energy_uj").write_text("7500000\n")  # +2.5 J
    (p1 / "energy_uj").write_text("1000000\n")  # wrapped: +2.0 J
    parts = meter.stop()
    assert [p["joules"] for p in parts] == [2.5, 2.0]
    assert parts[0]["source"] == f"rapl:{p0}" and "every process" in parts[0]["scope"]
    # two namespaces of one machine share a host name: its packages count once
    run = energy.total([parts, parts], ["vm", "vm"], seconds=2.0)
    assert run["joules"] == 4.5 and run["watts"] == 2.25 and len(run["sources"]) == 2
    assert energy.total([parts, parts], ["a", "b"], 2.0)["joules"] == 9.0  # two machines


def test_nothing_readable_is_not_measured_never_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(energy.ROOT_VARIABLE, str(tmp_path / "absent"))
    meter = energy.Meter(packages=True, gpu_index=None)
    meter.start()
    assert meter.stop() == []
    run = energy.total([[], []], ["vm", "vm"], 3.0)
    assert run["joules"] is None and run["watts"] is None and run["sources"] == ["not measured"]


def test_cost_per_million_samples_and_to_target_worked_by_hand() -> None:
    recs = records.load([GOLDEN]).records
    df = frame(recs)
    ok = df[(df["status"] == "ok") & df["grad_sync"].astype(bool)]
    price = cost.Price(3.6, "worker")  # 0.001 per worker-second
    table = cost.table(recs, price)
    for _, row in table.iterrows():
        cell = ok[(ok["engine"] == row["engine"]) & (ok["workers"] == row["workers"])]
        tput = float(cell["throughput"].median())
        assert row["per M samples"] == f"{0.001 * row['workers'] * 1e6 / tput:,.4f}"
        reached = cell["time_to_target"].dropna()
        if len(reached):
            expected = 0.001 * row["workers"] * float(np.median(reached))
            assert row["to 95% accuracy"].startswith(f"{expected:,.4f} ")
        assert row["power W"] == "not measured" and row["J/sample"] == "not measured"
    node = cost.table(recs, cost.Price(3.6, "node"))
    two = table[table["workers"] == 2].iloc[0]
    assert float(node[node["workers"] == 2].iloc[0]["per M samples"]) == pytest.approx(
        float(two["per M samples"]) / 2, rel=1e-3
    )


def test_compare_prints_the_cost_table_and_refuses_a_bad_price(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["compare", str(GOLDEN), "--price-per-hour", "2.5"]) == 0
    out = capsys.readouterr().out
    assert "cost and energy (price 2.5 per worker-hour" in out and "not measured" in out
    assert cli.main(["compare", str(GOLDEN), "--price-per-hour", "-1"]) == EXIT_BAD_INPUT
    assert "--price-per-hour must be a positive number" in capsys.readouterr().err
    assert cli.main(["compare", str(GOLDEN)]) == 0
    assert "cost and energy" not in capsys.readouterr().out  # no price, nothing measured
