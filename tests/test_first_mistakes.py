"""A new user's first mistakes: one line each on stderr, naming the flag typed and what
to do, with no usage dump and no traceback (issue 36)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import cli
from bench.engines import Engine
from bench.sweep.allreduce import Plan
from runners import hvd
from runners.protocol.main import build_parser

GOLDEN = Path(__file__).parent / "data" / "golden.jsonl"


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """stderr of `bench ARGV`, which must fail with status 2 in one line."""
    try:
        status = cli.main(argv)
    except SystemExit as exc:
        status = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert status == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and "usage:" not in err
    return lines[0]


@pytest.mark.parametrize("command", ["run", "collectives", "tune"])
def test_an_unknown_engine_is_named_once_the_same_way(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _fails([command, "--engines", "hovorod", "--dry-run"], capsys)
    assert "--engines: unknown engine 'hovorod' (did you mean horovod?)" in line
    assert line.count("engines are") == 1


ONE_WORDING = "unknown engine 'hovorod' (did you mean horovod?); engines are: horovod, ddp, paddle"


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["--config", "{config}"], "error: engines: "),
        (["--engine-option", "hovorod:fusion_threshold_mb=8"], "error: --engine-option "),
    ],
)
def test_an_unknown_engine_outside_engines_is_worded_the_same(
    argv: list[str], prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A config file's engines and an --engine-option's engine get the registry's wording."""
    config = tmp_path / "sweep.toml"
    config.write_text('engines = ["hovorod"]\n')
    line = _fails(["run", *(a.format(config=config) for a in argv), "--dry-run"], capsys)
    assert line.startswith(prefix) and line.endswith(ONE_WORDING)


def test_collectives_plan_words_an_unknown_engine_as_the_registry_does() -> None:
    with pytest.raises(ValueError) as err:
        Plan.parse(engines="ddp,hovorod", workers="2", sizes="4096", iters="5", threads="1",
                   device="cpu", timeout="60")  # fmt: skip
    assert str(err.value) == f"--engines: {ONE_WORDING}"


def test_a_misspelled_flag_gets_its_subcommands_suggestion(
    capsys: pytest.CaptureFixture[str],
) -> None:
    line = _fails(["run", "--wokers", "2"], capsys)
    assert line.startswith("bench run: error: unrecognized arguments: --wokers 2")
    assert "did you mean --workers?" in line


def test_a_word_for_a_number_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(["run", "--workers", "two"], capsys)
    assert "--workers" in line and "integers, e.g. 1,2" in line and "'two'" in line


def test_a_spec_flag_out_of_range_blames_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    line = _fails(["run", "--bucket-mb", "-1", "--dry-run"], capsys)
    assert line == "error: --bucket-mb must be > 0, got -1.0"


def test_run_help_lists_only_what_run_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())  # help wraps lines anywhere
    assert "--model " not in out and "--dataset " not in out and "--models" in out
    assert "(default: the 1-worker global batch)" in out


def _help_problems(text: str) -> list[str]:
    """Options in a --help whose help states its default twice, or a None default."""
    text = " ".join(text.split())  # help wraps lines anywhere
    options = text.split(" --")[1:]
    return [o for o in options if o.count("(default:") > 1 or "(default: None)" in o]


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_every_subcommand_states_each_default_once(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    assert _help_problems(capsys.readouterr().out) == []


def test_every_runner_states_each_default_once() -> None:
    helps = [build_parser(engine).format_help() for engine in Engine]
    assert _help_problems("".join(helps)) == []


def test_a_missing_folder_is_said_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _fails(["compare", str(tmp_path / "nowhere")], capsys)
    assert line == f"error: {tmp_path / 'nowhere'} does not exist (check the path)"


# Every way a subcommand is given result paths to read, each with one path missing and
# each asked to write something (--out, --results, --pytest-benchmark) it must not write.
MISSING_PATH_CASES = {
    "compare": ["compare", "{missing}", "--out", "{out}"],
    "compare-two-paths": ["compare", str(GOLDEN), "{missing}", "--out", "{out}"],
    "compare-base": ["compare", "--base", "{missing}", "--new", str(GOLDEN),
                     "--fail", "throughput:5%", "--out", "{out}"],
    "compare-new": ["compare", "--base", str(GOLDEN), "--new", "{missing}", "--out", "{out}"],
    "predict": ["predict", "{missing}", "--results", "{out}"],
    "predict-check": ["predict", "{missing}", "--check", "--fit-link", "500mbit"],
    "export": ["export", "{missing}", "--pytest-benchmark", "{out}/x.json"],
}  # fmt: skip


@pytest.mark.parametrize("case", list(MISSING_PATH_CASES))
def test_a_missing_results_path_is_exit_2_in_one_line_and_writes_nothing(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 is `--fail`'s regression; a mistyped path is a usage error (exit 2)."""
    missing, out = tmp_path / "old", tmp_path / "out"
    argv = [a.format(missing=missing, out=out) for a in MISSING_PATH_CASES[case]]
    line = _fails(argv, capsys)
    assert line == f"error: {missing} does not exist (check the path)"
    assert not out.exists(), sorted(out.rglob("*"))


def test_every_subcommand_that_reads_results_is_covered_above() -> None:
    """A subcommand that comes to take result paths gets its missing-path case too."""
    readers = set()
    for name in cli.COMMANDS:
        sub = cli._subparser(cli.parser(name), name)
        if {a.dest for a in sub._actions} & {"paths", "base", "new"}:
            readers.add(name)
    assert readers == {argv[0] for argv in MISSING_PATH_CASES.values()}


def test_a_file_that_holds_no_records_is_one_line_and_no_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = tmp_path / "README.md"
    readme.write_text("# a title\n\nsome prose\n" * 50)
    line = _fails(["compare", str(readme)], capsys)
    assert "is not a results file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


def test_export_creates_its_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "folder" / "sweep.json"
    assert cli.main(["export", str(GOLDEN), "--pytest-benchmark", str(out)]) == 0
    data = json.loads(out.read_text())
    groups = {b["group"].split(" (")[0] for b in data["benchmarks"]}
    assert groups == {"mlp/digits 1 worker", "mlp/digits 2 workers"}
    ddp2 = next(b for b in data["benchmarks"] if b["name"] == "train_step[mlp-digits-ddp-np2]")
    info = ddp2["extra_info"]
    assert info["ops_unit"] == "samples/s" and info["pooled_runs"] == 3
    # OPS is samples/s: the global batch over the mean step
    assert ddp2["stats"]["ops"] == pytest.approx(info["global_batch"] / ddp2["stats"]["mean"])


def test_a_pipe_closed_early_ends_quietly() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "compare", str(GOLDEN)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # as `| head -0` would
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) in (0, 141)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_the_synthetic_benchmarks_flags_are_aliases_or_pointers() -> None:
    argv = ["--fp16-allreduce", "--no-cuda", "--num-warmup-batches=3", "--batch-size", "64"]
    assert hvd.translate(argv) == [
        "--grad-compression", "fp16", "--device", "cpu", "--warmup-steps", "3",
        "--batch-size", "64",
    ]  # fmt: skip
    refusal = hvd.translate(["--model", "resnet50", "--num-iters", "10"])
    assert isinstance(refusal, str) and "\n" not in refusal
    assert refusal.startswith("error: --num-iters") and "--max-steps" in refusal


def test_the_runner_refuses_in_one_line_with_a_clean_status() -> None:
    """The runner prints its error and exits 2 (no Python traceback of its own); a launcher
    reports the status its own way."""
    root = Path(__file__).parent.parent
    for args in (["--num-iters", "5"], ["--model", "nosuch"]):
        proc = subprocess.run(
            [sys.executable, str(root / "runners" / "hvd.py"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
