"""The HTML report: self-contained, escaped, and rendered for real in headless Chromium."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import html, records
from tests.conftest import ROOT

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"
COLLECTIVE = {
    "kind": "collective",
    "status": "ok",
    "engine": "ddp",
    "world_size": 2,
    "results": [
        {"bytes": 4096 * 4**i, "latency_s": 1e-4 * 4**i, "busbw_gbps": 0.04 * (i + 1)}
        for i in range(4)
    ],
}


def _report(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.cli",
            "compare",
            str(GOLDEN),
            "--format",
            "html",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return out / "report.html"


def test_report_is_self_contained(tmp_path: Path) -> None:
    page = _report(tmp_path).read_text()
    assert "<h2>What was compared</h2>" in page and "records skipped: 1" in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched at view time
    assert page.count('class="plot"') >= 3


def test_strings_from_records_are_escaped() -> None:
    recs = copy.deepcopy(records.load([GOLDEN]).records)
    for r in recs:
        r["spec"]["model"] = "<script>alert('x')</script>"
        r.setdefault("env", {})["hostname"] = "<b>host</b>"
    page = html.render([*recs, COLLECTIVE])
    assert "<script>alert" not in page and "<b>host</b>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "&lt;b&gt;host&lt;/b&gt;" in page


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI; .ci/run installs it")
        pytest.skip("chromium not installed (apt-get install chromium); CI installs it")
    return found


def test_report_renders_with_every_plot_in_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    page = tmp_path / "report.html"
    page.write_text(html.render([*records.load([GOLDEN]).records, COLLECTIVE]))
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    body = re.search(r"<body[^>]*>", proc.stdout)
    assert body, proc.stderr[-2000:]
    loaded = re.search(r'data-plots-loaded="(\d+)"', body.group(0))
    total = re.search(r'data-plots="(\d+)"', body.group(0))
    assert loaded and total, body.group(0)
    assert int(total.group(1)) >= 4  # throughput/efficiency, curves, step spread, collectives
    assert loaded.group(1) == total.group(1)  # every plot decoded and has a size
