"""The HTML report: self-contained, escaped, and rendered for real in headless Chromium."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

from bench import cli, engines, records
from bench.records.types import LoadedRecord
from bench.render import html, plots
from bench.tables import compare
from tests.conftest import ROOT

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"
# not a whole record: what the collectives table reads
COLLECTIVE = cast(
    LoadedRecord,
    {
        "kind": "collective",
        "status": "ok",
        "engine": "ddp",
        "world_size": 2,
        "results": [
            {"bytes": 4096 * 4**i, "latency_s": 1e-4 * 4**i, "busbw_gbps": 0.04 * (i + 1)}
            for i in range(4)
        ],
    },
)


# each engine's own colour, from its registry entry
OWN = {e.value: engines.get(e).colour for e in engines.Engine}


def _rich() -> list[LoadedRecord]:
    """Golden records plus what real runs carry: step losses, samples seen, a Horovod timeline."""
    recs = copy.deepcopy(records.load([GOLDEN]).records)
    for r in recs:
        w = r["world_size"]
        r["global_batch"] = 32 * w
        r["step_losses"] = [2.0 / (1 + 0.1 * i) for i in range(40 // w)]
        for i, e in enumerate(r.get("epochs") or []):
            e["samples_seen"] = (i + 1) * 640
        if r["engine"] == "horovod" and r["status"] == "ok":
            r["timeline"] = {"per_step_ms": {"negotiation": 2.0, "allreduce": 6.0 * w, "wait": 1.0}}
        synced = r["spec"].get("grad_sync", True)
        r["breakdown"] = {  # profiled phases, ms per rank (runners/protocol/profile.py)
            "steps": 10, "after_timed": True,
            "phases_ms": {"forward": [0.1] * w, "backward": [0.2] * w, "optimizer": [0.05] * w,
                          "step": [0.4] * w},
            "forward_iqr_ms": [[0.09, 0.11]] * w,
            "comm_ms": [0.3 * synced] * w, "comm_source": "DDP communication hook",
        }  # fmt: skip
    return [*recs, COLLECTIVE]


def _report(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
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


CAPTIONS = [
    "throughput and scaling efficiency: medians with 95% intervals (n beside each in the tables)",
    "training loss against samples seen",
    "communication cost: throughput of each multi-worker cell and of its grad_sync=false twin",
    "where the step goes: compute and optimizer from the compute-only twin",
    "head to head: each engine's throughput relative to the fastest",
    "time to 95% test accuracy",
    "Horovod timeline breakdown per step",
    "per-rank step times",
    "allreduce bus bandwidth by message size",
]


def test_every_figure_is_drawn_in_order_and_inline_once(tmp_path: Path) -> None:
    page = html.build(_rich())
    shown = re.findall(r"<figcaption>([^<]*)</figcaption>", page.html)
    assert len(shown) == len(CAPTIONS) == len(page.figures)
    for caption, wanted in zip(shown, CAPTIONS, strict=True):
        assert caption.startswith(wanted.replace("'", "&#x27;")), caption
    assert all(png.startswith(b"\x89PNG") for png in page.figures)
    # no module-level state: a second report does not see the first one's figures
    assert len(html.build(records.load([GOLDEN]).records).figures) < len(page.figures)
    # --out writes the one page, figures inline only: never a second copy beside it
    out = _report(tmp_path).parent
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]
    assert len(re.findall("<figcaption>", (out / "report.html").read_text())) >= 3


def _drawn(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Every figure of the rich report, by caption, before it is turned into a PNG."""
    drawn: dict[str, Any] = {}
    add = plots.Figures.add

    def keep(self: plots.Figures, fig: Any, caption: str) -> str:
        drawn[caption] = [
            {
                "ylim": ax.get_ylim(),
                "xlim": ax.get_xlim(),
                "errorbars": sum(type(c).__name__ == "ErrorbarContainer" for c in ax.containers),
                "lines": [
                    (
                        str(line.get_label()),
                        line.get_color(),
                        line.get_linestyle(),
                        line.get_marker(),
                    )
                    for line in ax.get_lines()
                    if not str(line.get_label()).startswith("_")
                ],
                "patches": [(str(p.get_label()), p.get_facecolor()) for p in ax.patches],
            }
            for ax in fig.axes
        ]
        return add(self, fig, caption)

    monkeypatch.setattr(plots.Figures, "add", keep)
    html.build(_rich())
    return drawn


def _one(drawn: dict[str, Any], start: str) -> Any:
    return next(v for k, v in drawn.items() if k.startswith(start))


def test_intervals_are_error_bars_on_axes_from_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = _drawn(monkeypatch)
    tp, eff = _one(drawn, "throughput and scaling efficiency")
    # one error bar series per engine with ok runs (ddp, horovod; paddle np=2 timed out)
    assert tp["errorbars"] == 2 and eff["errorbars"] == 2
    assert tp["ylim"][0] == 0 and eff["ylim"][0] == 0
    (h2h,) = _one(drawn, "head to head")
    assert h2h["errorbars"] == 4 and h2h["xlim"][0] == 0
    (comm,) = _one(drawn, "communication cost")
    assert comm["errorbars"] == 2 and comm["ylim"][0] == 0  # ddp np=2 real and twin


def test_one_colour_per_engine_and_coinciding_curves_stay_visible(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from matplotlib.colors import to_hex

    drawn = _drawn(monkeypatch)
    colours: dict[str, set[str]] = {}
    for axes in drawn.values():
        for ax in axes:
            for label, colour, _, _ in ax["lines"]:
                engine = label.split(" ")[0]
                if engine in OWN:
                    colours.setdefault(engine, set()).add(to_hex(colour))
    assert colours == {e: {c} for e, c in OWN.items() if e in colours}
    assert set(colours) == {"ddp", "horovod"}
    # the golden losses are identical for every engine: they must differ in dash and marker
    loss_np1 = _one(drawn, "training loss against samples seen")[0]["lines"]
    assert len(loss_np1) == 2
    assert len({(ls, marker) for _, _, ls, marker in loss_np1}) == 2


def test_comparisons_name_their_machine_in_the_page() -> None:
    recs = records.load([GOLDEN]).records
    other = [cast(LoadedRecord, {**r, "env": {**r["env"], "cpu": "Other CPU"}}) for r in recs]
    page = html.render(recs + other)
    assert "<b>machine:</b> Golden CPU x2 | torch 2.13.0" in page
    assert "<b>machine:</b> Other CPU x2 | torch 2.13.0" in page
    assert len(compare.compare(recs + other)) == 2


def test_screenshot_in_chromium(tmp_path: Path) -> None:
    """A real browser draws the page; the screenshot is kept for a person to look at.
    What it shows is held here too: real tables, not aligned text, and each figure once."""
    browser = _chromium()
    page = tmp_path / "report.html"
    text = html.render(_rich())
    page.write_text(text)
    assert text.count("<table") >= 8 and "<pre" not in text
    shown = re.findall(r'<img class="plot"[^>]*src="([^"]+)"', text)
    assert len(shown) == len(set(shown)) == len(CAPTIONS)
    shot = tmp_path / "report.png"
    proc = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,7000",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 50_000, proc.stderr[-2000:]


REFERENCE = ROOT / "results" / "reference" / "cpu-2core-digits"


def _outline(page: str) -> list[str]:
    """A report's headings, captions and table headers: what changes when the report's
    layout does (the PNG bytes vary with matplotlib's version; the numbers with records)."""
    return re.findall(r"<h\d[^>]*>.*?</h\d>|<figcaption>.*?</figcaption>|<th[^>]*>.*?</th>", page)


def test_the_committed_reference_report_is_current_and_alone(tmp_path: Path) -> None:
    """results/reference/cpu-2core-digits holds its records and one self-contained report,
    as `bench compare DIR --format html --out DIR` makes it today."""
    shown = sorted(p.name for p in REFERENCE.iterdir() if not p.name.startswith("."))  # caches
    assert shown == ["report.html", "runs.jsonl"]
    assert cli.main(["compare", str(REFERENCE), "--format", "html", "--out", str(tmp_path)]) == 0
    fresh = _outline((tmp_path / "report.html").read_text())
    assert _outline((REFERENCE / "report.html").read_text()) == fresh, (
        f"rebuild it: bench compare {REFERENCE.relative_to(ROOT)} --format html --out "
        f"{REFERENCE.relative_to(ROOT)}"
    )


def test_without_out_the_page_goes_to_report_and_says_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", str(GOLDEN), "--format", "html"]) == 0
    out, err = capsys.readouterr()
    assert out == ""  # never poured into the terminal
    assert f"wrote {Path('report') / 'report.html'}" in err
    assert sorted(p.name for p in (tmp_path / "report").iterdir()) == ["report.html"]


def test_tables_align_as_the_text_does() -> None:
    """Numbers right, names and prose left (all right-aligned, evidence read ragged)."""
    page = html.render(_rich())
    verdict = page.split("<summary>verdict</summary>")[1].split("</table>")[0]
    assert "<th>engine</th>" in verdict and '<th class="num">workers</th>' in verdict
    assert '<th class="num">lost ms</th>' in verdict and "<th>evidence</th>" in verdict
    assert re.search(r"<td>compute 0%", verdict) and '<td class="num">106.67</td>' in verdict


def test_the_knobs_that_differ_are_a_table() -> None:
    comp = compare.Comparison(
        "t",
        "g",
        {},
        [],
        knobs={"ddp": [{"bucket_cap_mb": 25.0}], "horovod": [{"fusion_threshold_bytes": 26214400}]},
    )
    page = "".join(html._knobs(comp))
    assert "<table" in page and "<td>25 MB</td>" in page and "<th>setting</th>" in page


def test_the_summary_comes_first_and_every_other_section_is_collapsed() -> None:
    """The text report's first screen opens the page: its table and answers, then the
    figures; each full section, the notes, knobs and spec are <details> a reader opens.
    No spec is dumped as raw JSON."""
    page = html.render(records.load([GOLDEN]).records)
    body = page.split("<h2>mlp on digits", 1)[1]
    first_details = body.index("<details>")
    assert body.index("<h3>answers</h3>") < first_details
    assert "ddp is 1.25x [1.09, 1.43] as fast as horovod" in body[:first_details]
    for name in ("throughput", "head to head", "decided", "noise", "notes", "spec"):
        assert f"<details><summary>{name}</summary>" in body, name
    assert "<h3>throughput</h3>" not in body and '{"allow_tf32"' not in body
