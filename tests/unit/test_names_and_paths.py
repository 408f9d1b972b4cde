"""Names are data, keys are derived (safe_key); identifiers refused at load; output paths checked before measuring.

Also: a symlinked reference table is written through its link, ``alflow report`` on damaged parquet files and
``alflow sim serve --step-log`` into a missing folder answer in one line, never a traceback.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prefect.types.names import raise_on_name_alphanumeric_dashes_only
from pydantic import ValidationError
from typer.testing import CliRunner

from alflow.cli import app
from alflow.config import ModelSpec, ServerPlacement, server_config
from alflow.errors import InvalidInputError
from alflow.reference.table import load_reference, update_reference
from alflow.results.store import RunWriter, StoreError, open_run
from alflow.util.fsutil import check_writable_dir, check_writable_file, confined, real_path
from alflow.util.names import MAX_IDENTIFIER, check_env_names, check_identifier, safe_key
from alflow_flows.common import check_outputs
from tests.unit.report_runs import write_m2
from tests.unit.test_reference import _empty, _entry

pytestmark = pytest.mark.unit

KEY = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


# --------------------------------------------------------------------------------------------
# safe_key


@pytest.mark.parametrize(
    "text",
    [
        "Qwen/Qwen3-8B",
        "日本語モデル",
        "org/日本語-8B",
        "abc\u202edef",  # right-to-left override
        "a\0b",
        "",
        "x" * 5000,
        "---",
        "Café Ünïcode",
        "[x](javascript:alert(1))\n<script>",
    ],
)
def test_safe_key_is_a_prefect_artifact_key(text: str) -> None:
    key = safe_key(text)
    assert KEY.match(key), key
    assert len(key) <= 64
    assert raise_on_name_alphanumeric_dashes_only(key) == key  # what Prefect checks artifact keys with
    assert safe_key(text) == key  # stable: the same name keeps its artifact history


def test_safe_key_keeps_what_ascii_it_can_and_never_collides() -> None:
    assert safe_key("Qwen/Qwen3-8B").startswith("qwen-qwen3-8b-")
    assert safe_key("Café").startswith("cafe-")
    assert safe_key("日本語モデル").startswith("x-")
    names = [
        "日本語モデル",
        "中文模型",
        "Qwen/Qwen3",
        "qwen-qwen3",
        "QWEN/QWEN3",
        "a\0b",
        "a b",
        "ab",
        "a\u202eb",
        "",
    ]
    keys = {safe_key(n) for n in names}
    assert len(keys) == len(names)  # slugs agree, hashes do not
    long_a, long_b = "m" * 300 + "a", "m" * 300 + "b"
    assert safe_key(long_a) != safe_key(long_b)
    assert len(safe_key("y" * 300, max_len=20)) == 20
    with pytest.raises(ValueError, match="too short"):
        safe_key("x", max_len=5)


def test_safe_key_without_hash_keeps_a_plain_slug_for_run_names() -> None:
    assert safe_key("demo-llama-70b-k2", always_hash=False) == "demo-llama-70b-k2"
    assert KEY.match(safe_key("日本語-k2", always_hash=False))
    assert safe_key("Qwen/Qwen3-k2", always_hash=False) != "qwen-qwen3-k2"


# --------------------------------------------------------------------------------------------
# identifiers and env names, refused at load


@pytest.mark.parametrize("bad", ["a\0b", "model\n", "a\x1bb", "\x7f", "a\x9bb"])
def test_control_characters_in_identifiers_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="control character"):
        check_identifier(bad, what="model id")
    with pytest.raises(ValidationError, match=r"model id .* holds the control character"):
        ModelSpec(id=bad)
    with pytest.raises(ValidationError, match="control character"):
        server_config(framework="sim", model=bad)
    with pytest.raises(ValidationError, match="draft_model"):
        server_config(
            framework="sim", model="m", speculative={"method": "eagle3", "k": 2, "draft_model": bad}
        )


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (" ", "is blank"),
        ("\u3000\t", "is blank"),
        ("m" * (MAX_IDENTIFIER + 1), f"longer than the {MAX_IDENTIFIER:,} characters"),
        ("m" * 2_000_000, "(2,000,000 characters) is longer"),
    ],
)
def test_blank_or_overlong_identifiers_are_refused_in_one_short_line(bad: str, fragment: str) -> None:
    """A model id of spaces was served, and one of 2 million characters reached every page (issue #49)."""
    for make in (
        lambda: ModelSpec(id=bad),
        lambda: server_config(framework="sim", model=bad),
        lambda: server_config(framework="sim", model="m", image=bad),
    ):
        with pytest.raises(ValidationError) as caught:
            make()
        assert fragment in str(caught.value)
        assert len(str(caught.value)) < 2_000  # the value cut, not printed whole
    assert check_identifier("m" * MAX_IDENTIFIER) == "m" * MAX_IDENTIFIER


def test_printable_identifiers_of_any_script_are_kept() -> None:
    for name in (
        "日本語/モデル",
        "org/model a",
        "emoji \U0001f468\u200d\U0001f4bb",
        "[x](javascript:alert(1))",
    ):
        assert ModelSpec(id=name).id == name
        assert server_config(framework="sim", model=name).model == name


@pytest.mark.parametrize("bidi", ["\u202e", "\u2066", "\u200f"])
def test_bidirectional_formatting_characters_are_refused_in_identifiers(bidi: str) -> None:
    """Hostile round 6 (F25): an RLO in a model id reached the site's index raw ("Trojan source")."""
    with pytest.raises(ValidationError, match=f"U\\+{ord(bidi):04X}.*bidirectional"):
        ModelSpec(id=f"abc{bidi}def")


@pytest.mark.parametrize("name", ["A=B", "", "A\0B", "="])
def test_unusable_env_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match="not an environment variable name"):
        check_env_names({name: "1"})
    with pytest.raises(ValidationError, match="extra_env name"):
        server_config(framework="sim", model="m", extra_env={name: "1"})
    assert server_config(framework="sim", model="m", extra_env={"VLLM_LOGGING_LEVEL": "DEBUG"}).extra_env


# --------------------------------------------------------------------------------------------
# output paths, checked before anything is measured


def test_results_root_checks(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert check_writable_dir(tmp_path / "new" / "deeper", what="results_root") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # nothing is created by the check
    assert check_writable_dir(tmp_path, what="results_root") == tmp_path
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # the probe is gone
    cases = {
        str(afile): "is a regular file, not a folder",
        str(afile / "sub" / "dir"): f"is under {afile}, which is a regular file",
        "/dev/null": "is a character device, not a folder",
        "/dev/null/x": "is under /dev/null, which is a character device",
    }
    for path, why in cases.items():
        with pytest.raises(InvalidInputError) as err:
            check_writable_dir(path, what="results_root")
        message = str(err.value)
        assert message.startswith(f"results_root {path!r} "), message
        assert why in message, message
        assert "allowed: " in message
        assert "\n" not in message


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_proc_is_not_a_results_root() -> None:
    with pytest.raises(InvalidInputError, match="results_root '/proc' is not writable"):
        check_writable_dir("/proc", what="results_root")


def test_reference_path_checks(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(InvalidInputError, match=r"its folder .* is a regular file, not a folder"):
        check_writable_file(afile / "ref.yaml", what="reference_path")
    with pytest.raises(InvalidInputError, match="reference_path '/dev/null' is a character device"):
        check_writable_file("/dev/null", what="reference_path")
    with pytest.raises(InvalidInputError, match="is a folder"):
        check_writable_file(tmp_path, what="reference_path")
    assert (
        check_writable_file(tmp_path / "sub" / "ref.yaml", what="reference_path")
        == tmp_path / "sub" / "ref.yaml"
    )


def test_check_outputs_refuses_an_m0_whose_table_or_root_cannot_be_written(tmp_path: Path) -> None:
    from alflow.config import CalibrateParams

    afile = tmp_path / "afile"
    afile.write_text("x")
    model = ModelSpec(id="日本語モデル")
    good = CalibrateParams(
        models=(model,),
        ks=(2,),
        server=server_config(framework="sim", model=model.id),
        placement=ServerPlacement(results_root=str(tmp_path / "results")),
        reference_path=str(tmp_path / "ref.yaml"),
    )
    check_outputs(good)
    with pytest.raises(InvalidInputError, match=r"^reference_path "):
        check_outputs(good.model_copy(update={"reference_path": str(afile / "ref.yaml")}))
    with pytest.raises(InvalidInputError, match=r"^results_root '/dev/null'"):
        check_outputs(good.model_copy(update={"placement": ServerPlacement(results_root="/dev/null")}))
    check_outputs(good.model_copy(update={"placement": ServerPlacement(results_root="s3://bucket/x")}))


def test_run_writer_refuses_an_unusable_root_in_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    for root in (str(afile), str(afile / "results"), "/dev/null"):
        with pytest.raises(InvalidInputError, match=r"^results_root "):
            RunWriter(root, "m2")


# --------------------------------------------------------------------------------------------
# a symlinked reference table is updated in place


def test_a_symlinked_reference_table_is_written_through_its_link(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    real = shared / "ref.yaml"
    link = tmp_path / "ref.yaml"
    empty = _empty()
    update_reference(real, [_entry(2, 1.8, model="日本語モデル")], new=empty)
    link.symlink_to(real)
    assert check_writable_file(link, what="reference_path") == real_path(real)

    previous, _ = update_reference(link, [_entry(2, 1.9, model="日本語モデル")], new=empty)

    assert previous is not None
    assert previous.entries[0].al == 1.8
    assert link.is_symlink()  # still a link
    assert link.readlink() == real
    assert load_reference(real).entries[0].al == 1.9  # its target holds the new content
    assert load_reference(link).entries[0].al == 1.9
    assert (shared / "ref.yaml.lock").exists()  # one lock, beside the real table
    assert not (tmp_path / "ref.yaml.lock").exists()


# --------------------------------------------------------------------------------------------
# alflow report on damaged parquet files; unusable run directories


def _damaged(tmp_path: Path, how: str, table: str = "spec_stats") -> tuple[str, Path]:
    run = write_m2(tmp_path)
    target = Path(run) / f"{table}.parquet"
    if how == "missing":
        target.unlink()
    elif how == "truncated":
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2])
    else:
        target.write_bytes(b"this is not parquet\0\xff")
    return run, target


@pytest.mark.parametrize("how", ["missing", "truncated", "garbage"])
def test_report_on_a_damaged_table_says_which_file_in_one_line(tmp_path: Path, how: str) -> None:
    run, target = _damaged(tmp_path, how)
    runner = CliRunner()
    with pytest.raises(StoreError, match=re.escape(str(target))):
        open_run(run).table("spec_stats")

    for fmt in ("csv", "json"):  # exports are read by programs: refused, naming the file
        result = runner.invoke(app, ["report", run, "-f", fmt])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: {target}"), result.stderr
        assert "Traceback" not in result.output + result.stderr

    for fmt in (
        "md",
        "html",
    ):  # an M2 run's points are its report (hostile round 17, F3): refused, naming the file
        result = runner.invoke(app, ["report", run, "-f", fmt, "-o", str(tmp_path / f"out.{fmt}")])
        assert result.exit_code == 2, result.output
        assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
        assert result.stderr.startswith(f"error: {target}"), result.stderr
        assert not (tmp_path / f"out.{fmt}").exists()

    matrix = runner.invoke(app, ["report", "k-schedule", run])
    assert matrix.exit_code == 2
    assert "Traceback" not in matrix.output + matrix.stderr


@pytest.mark.parametrize("how", ["missing", "truncated", "garbage"])
def test_a_report_without_a_damaged_side_table_renders_what_survived_with_one_warning(
    tmp_path: Path, how: str
) -> None:
    run, target = _damaged(tmp_path, how, "requests")
    for fmt in ("md", "html"):  # a reader gets what survived, and one warning naming the damaged file
        result = CliRunner().invoke(app, ["report", run, "-f", fmt, "-o", str(tmp_path / f"out.{fmt}")])
        assert result.exit_code == 0, result.output
        warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1, result.stderr
        assert str(target) in warnings[0], result.stderr
        assert (tmp_path / f"out.{fmt}").read_text()
        assert "Traceback" not in result.stderr


def test_report_on_unusable_paths_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    runner = CliRunner()
    for args in (
        ["report", str(afile)],
        ["report", str(afile / "run")],
        ["report", "/dev/null"],
        ["report", "compare", "--root", str(afile)],
        ["report", "compare", "--root", "/dev/null"],
        ["report", "compare", "--root", str(afile / "x")],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, (args, result.stderr)
        assert lines[0].startswith("error: "), (args, result.stderr)


# --------------------------------------------------------------------------------------------
# sim serve --step-log


def test_sim_step_log_into_a_missing_folder_is_refused_before_listening(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    runner = CliRunner()
    for path, why in (
        (tmp_path / "missing" / "steps.jsonl", "does not exist"),
        (afile / "steps.jsonl", "is not a folder"),
        (tmp_path, "is a folder"),
    ):
        result = runner.invoke(app, ["sim", "serve", "--step-log", str(path), "--port", "1"])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"error: --step-log '{path}'"), result.stderr
        assert why in lines[0]
        assert "listening" not in result.stdout.lower()


def test_writable_path_checks_name_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    for bad in ("", "a\0b"):
        with pytest.raises(InvalidInputError, match=r"^--out .* is not a path; allowed: a folder"):
            check_writable_dir(bad, what="--out")
        with pytest.raises(InvalidInputError, match=r"^--table .* is not a path; allowed: a file path$"):
            check_writable_file(bad, what="--table")
    with pytest.raises(InvalidInputError, match=r"is a folder; allowed: a regular file"):
        check_writable_file(tmp_path, what="--table")
    assert confined(tmp_path, tmp_path / "missing.txt") is None


@pytest.mark.parametrize(
    ("given", "local"),
    [
        ("/tmp/x", "/tmp/x"),
        ("file:///tmp/x", "/tmp/x"),
        ("file://localhost/tmp/x", "/tmp/x"),  # hostile round 4: read as the relative path localhost/tmp/x
        ("local:///tmp/x", "/tmp/x"),
        ("s3://bucket/x", None),
    ],
)
def test_the_local_path_a_root_names(given: str, local: str | None) -> None:
    from alflow.util.fsutil import local_path_of

    assert local_path_of(given) == local
