"""`bench compare` asked again: the same records, arguments and code print the same output
without pandas; anything the output is made from, changed, makes the tables afresh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
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
    """One run's throughput rewritten in place, the file's size and modification time
    kept (set back as `touch -d` or `cp -p` would): the key holds the change time, which
    the kernel sets on every write and utime, so the replay is not used. The folder's
    column caches go too, so that the tables read the new bytes and show the figure."""
    file = results / "runs.jsonl"
    first, _, _ = _compare(str(results), "--sources")
    text = file.read_text()
    value = json.loads(text.splitlines()[0])["throughput"]
    old = f'"throughput": {json.dumps(value)}'
    new = old.replace(": 1", ": 9", 1) if ": 1" in old else old.replace(": ", ": 1", 1)[:-1]
    assert len(new) == len(old) and text.count(old) == 1, old
    before = file.stat()
    file.write_text(text.replace(old, new))
    os.utime(file, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = file.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns, "this filesystem's clock is too coarse"
    for derived in results.glob(".runs.jsonl.*"):
        shutil.rmtree(derived)
    again, _, modules = _compare(str(results), "--sources")
    assert "pandas" in modules  # made afresh, not replayed
    shown = f"{float(json.loads(new.split(': ', 1)[1])):,.0f}"
    assert shown in again and shown not in first


def test_an_appended_record_is_read_again(cache: Path, results: Path) -> None:
    file = results / "runs.jsonl"
    _, err, _ = _compare(str(results))
    first = json.loads(file.read_text().splitlines()[0])
    with file.open("a") as fh:
        fh.write(json.dumps({**first, "run_id": "appended"}) + "\n")
    _, err_again, modules = _compare(str(results))
    assert "pandas" in modules and err_again != err  # one more record read


AUDIT = """
import json, os, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(os.fsdecode(args[0]))
                 if event == "open" and isinstance(args[0], (str, bytes)) else None)
from bench.cli import main, replay
material = replay.key_material("compare", {}, sys.argv[1:2], 100)
start = len(opened)
status = main(["compare", *sys.argv[1:]])
print(json.dumps({"status": status, "opened": opened[start:], "files": material["files"],
                  "code": [str(p) for p in replay.code_folders()], "replay": str(replay.folder())}))
"""


def test_every_file_a_comparison_opens_is_one_the_key_covers(cache: Path, results: Path) -> None:
    """An audit hook, in a fresh interpreter, sees every file a comparison opens: each must
    be a records file in the key, a cache derived from one beside it, a source file of
    the bench and models packages (each in the key), the interpreter's or a library's
    (their folders are in the key), or the replay entry. The folder also holds what a
    results folder may (a peak cache, logs), so a side file compare began to read would
    show here. A new input missing from the key fails this test."""
    shutil.copy(ROOT / "results" / "reference" / "predict-check-2026-12-03" / "peak-flops.json",
                results / "peak-flops.json")  # fmt: skip
    (results / "runs" / "cell").mkdir(parents=True)
    (results / "runs" / "cell" / "launcher.log").write_text("a launcher's log\n")
    proc = subprocess.run(
        [sys.executable, "-c", AUDIT, str(results), "--sources", "--all"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["status"] == 0
    seen = {os.path.realpath(p) for p in got["opened"]}
    keyed = {os.path.realpath(entry[0]) for entry in got["files"]}
    code = tuple(os.path.realpath(c) + os.sep for c in got["code"])
    libraries = tuple(os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix))
    system = ("/proc/", "/sys/", "/dev/", "/etc/", "/usr/")
    derived = tuple(str(Path(f).parent / f".{Path(f).name}.") for f in keyed)

    def covered(path: str) -> bool:
        if path in keyed or path.startswith(derived + libraries + system):
            return True
        if path.startswith(os.path.realpath(got["replay"]) + os.sep):
            return True
        return path.startswith(code) and path.endswith((".py", ".pyc"))

    assert keyed and keyed <= seen
    assert sorted(p for p in seen if not covered(p)) == [], "compare read what its key lacks"


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
    entries: dict[str, Path | None] = {}
    for age, fmt in zip((300, 200, 100), ("text", "csv", "json"), strict=True):
        argv = ["compare", str(results), "--format", fmt]
        assert cli.main(argv) == 0
        # where compare.run keeps it: the parsed arguments, the paths, the width
        args = vars(cli.parser("compare").parse_args(argv))
        path = replay.Replay.of("compare", args, [str(results)], choices.width()).path
        assert path is not None and path.exists()
        then = time.time() - age  # used in this order, whatever the clock's tick
        os.utime(path, (then, then))
        entries[fmt] = path
    capsys.readouterr()
    assert set(cache.glob("*.json")) == {entries["csv"], entries["json"]}


def test_a_part_left_by_a_dead_writer_is_removed(
    cache: Path, results: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache.mkdir(parents=True)
    dead, live = cache / ".a.json.123", cache / ".b.json.456"
    for part in (dead, live):
        part.write_text('{"version"')
    old = time.time() - replay.STALE_PART_S - 60
    os.utime(dead, (old, old))
    assert cli.main(["compare", str(results)]) == 0
    capsys.readouterr()
    assert not dead.exists() and live.exists()


def test_an_output_too_long_to_keep_is_printed_not_kept(
    cache: Path, results: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(replay, "MOST_BYTES", 100)
    assert cli.main(["compare", str(results)]) == 0
    assert "records read" in capsys.readouterr().err
    assert not list(cache.glob("*.json"))


def test_no_home_folder_means_no_replay(
    results: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`env -i` under a user the password file does not know: Path.home() raises."""

    def nowhere() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(replay, "user_cache", nowhere)
    assert cli.main(["compare", str(results)]) == 0
    assert "records read" in capsys.readouterr().err
