"""`bench compare` asked again: the same records, arguments and code print the same output
without pandas; anything the output is made from, changed, makes the tables afresh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cli
from bench.cli import replay
from bench.cli.common import EXIT_BAD_INPUT
from bench.render import choices
from tests.conftest import ROOT

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user cache of this test's own, for this process and the ones it starts."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "bench" / "replay"


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "res"
    folder.mkdir()
    shutil.copy(GOLDEN, folder / "runs.jsonl")
    return folder


def _compare(*args: str) -> tuple[str, str, list[str]]:
    """A `bench compare` in a fresh interpreter: stdout, stderr without -X importtime's
    lines, and the modules it imported."""
    code = "import sys\nfrom bench.cli import main\nsys.exit(main())"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, "compare", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines(keepends=True)
    timing = [line for line in lines if line.startswith("import time:")]
    modules = [line.rsplit("|", 1)[-1].strip() for line in timing]
    return proc.stdout, "".join(line for line in lines if line not in timing), modules


def test_the_same_comparison_again_prints_the_same_without_pandas(
    cache: Path, results: Path
) -> None:
    out, err, modules = _compare(str(results))
    assert "pandas" in modules and "records read" in err
    again, err_again, modules_again = _compare(str(results))
    assert (again, err_again) == (out, err)  # stdout and stderr alike
    assert "pandas" not in modules_again and "pyarrow" not in modules_again
    assert len(list(cache.glob("*.json"))) == 1


def test_a_records_file_rewritten_with_its_size_and_time_kept_is_read_again(
    cache: Path, results: Path
) -> None:
    """The same size and modification time (set back as `touch -d` or `cp -p` would),
    one figure different: the key holds the change time, which the kernel sets on every
    write and utime, so the tables are made afresh."""
    file = results / "runs.jsonl"
    _compare(str(results))
    text = file.read_text()
    rec = json.loads(text.splitlines()[0])
    old = json.dumps(rec["throughput"])
    new = old[:-1] + ("1" if old[-1] != "1" else "2")  # same length, another value
    assert old in text
    stat = file.stat()
    file.write_text(text.replace(old, new, 1))
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file.stat().st_size == stat.st_size
    again, _, modules = _compare(str(results))
    assert "pandas" in modules  # made afresh, not replayed
    fresh, _, _ = _compare(str(results), "--no-replay")
    assert again == fresh


def test_an_appended_record_is_read_again(cache: Path, results: Path) -> None:
    file = results / "runs.jsonl"
    _, err, _ = _compare(str(results))
    first = json.loads(file.read_text().splitlines()[0])
    with file.open("a") as fh:
        fh.write(json.dumps({**first, "run_id": "appended"}) + "\n")
    _, err_again, modules = _compare(str(results))
    assert "pandas" in modules and err_again != err  # one more record read


def test_every_file_a_comparison_opens_is_one_the_key_covers(
    cache: Path, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An audit hook sees every file the comparison opens: each must be a records file
    in the key, a cache derived from one beside it, or code and libraries (the bench and
    models packages' files, each in the key; the interpreter's and the libraries', whose
    folders are). A new input read by compare and missing from the key fails here."""
    opened: list[str] = []

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "open" and isinstance(args[0], str | bytes):
            opened.append(os.fsdecode(args[0]))

    sys.addaudithook(hook)  # stays for the process: it records into this test's list only
    material = replay.key_material("compare", {}, [str(results)], 100)
    start = len(opened)
    assert cli.main(["compare", str(results), "--sources", "--all"]) == 0
    seen = {os.path.realpath(p) for p in opened[start:]}
    keyed = {os.path.realpath(entry[0]) for entry in material["files"]}
    allowed = (
        *(str(folder) for folder in replay.code_folders()),  # in the key
        os.path.realpath(sys.prefix),  # libraries: their folders in the key
        os.path.realpath(sys.base_prefix),  # the standard library: sys.version in the key
        str(cache.parent),
        "/proc/",
        "/sys/",
        "/dev/",
        "/etc/",
        "/usr/",
    )
    derived = tuple(str(Path(f).parent / f".{Path(f).name}.") for f in keyed)
    unkeyed = sorted(
        p for p in seen - keyed if not p.startswith(allowed) and not p.startswith(derived)
    )
    assert keyed and keyed <= seen
    assert unkeyed == [], "compare read files its replay key does not cover"
    capsys.readouterr()


def test_what_changes_the_output_changes_the_key(results: Path) -> None:
    args = {"format": "text", "sources": False, "command": "compare", "no_replay": False}
    base = replay.Replay.of("compare", args, [str(results)], 100).path
    assert base is not None
    assert replay.Replay.of("compare", args, [str(results)], 100).path == base
    assert replay.Replay.of("compare", args, [str(results)], 80).path != base  # width
    assert replay.Replay.of("compare", {**args, "sources": True}, [str(results)], 100).path != base
    # what does not change the output does not change the key
    assert (
        replay.Replay.of("compare", {**args, "no_replay": True}, [str(results)], 100).path == base
    )


def test_the_source_identity_follows_every_python_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.py").write_text("A = 1\n")
    (tmp_path / "sub" / "b.py").write_text("B = 1\n")
    first = replay.source_identity(tmp_path)
    (tmp_path / "sub" / "b.py").write_text("B = 10\n")
    second = replay.source_identity(tmp_path)
    (tmp_path / "sub" / "c.py").write_text("")
    (tmp_path / "notes.txt").write_text("not code")
    third = replay.source_identity(tmp_path)
    assert first != second != third and len(third) == 3


def test_no_replay_makes_the_tables_and_keeps_nothing(
    cache: Path, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compare", str(results), "--no-replay"]) == 0
    assert capsys.readouterr().out
    assert not cache.exists()


def test_a_failed_comparison_is_not_kept(
    cache: Path, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compare", str(results), "--price-per-hour", "-1"]) == EXIT_BAD_INPUT
    assert "--price-per-hour" in capsys.readouterr().err
    assert not cache.exists() or not list(cache.glob("*.json"))


def test_a_cache_that_cannot_be_written_changes_nothing(
    tmp_path: Path,
    results: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")  # the cache's parent is a file: nothing can be made under it
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    outputs = []
    for _ in range(2):
        assert cli.main(["compare", str(results)]) == 0
        outputs.append(capsys.readouterr())
    assert outputs[0] == outputs[1] and "records read" in outputs[0].err


def test_a_damaged_entry_is_made_afresh(
    cache: Path, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["compare", str(results)]) == 0
    made = capsys.readouterr()
    (entry,) = cache.glob("*.json")
    entry.write_text('{"version": 1, "chunks": [["out", ')  # cut off mid-write
    assert cli.main(["compare", str(results)]) == 0
    assert capsys.readouterr() == made
    assert json.loads(entry.read_text())["chunks"]  # and kept whole again


def test_the_most_recently_used_entries_are_kept(
    cache: Path, results: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(replay, "KEEP", 2)
    entries = {}
    for fmt in ("text", "csv", "json"):
        argv = ["compare", str(results), "--format", fmt]
        assert cli.main(argv) == 0
        # where compare.run keeps it: the parsed arguments, the paths, the width
        args = vars(cli.parser("compare").parse_args(argv))
        entries[fmt] = replay.Replay.of("compare", args, [str(results)], choices.width()).path
    capsys.readouterr()
    assert set(cache.glob("*.json")) == {entries["csv"], entries["json"]}
