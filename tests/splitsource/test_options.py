from __future__ import annotations

from dataclasses import dataclass

import pytest

from splitsource import OptionsError, Secret, name_list, option, parse_options


@dataclass(frozen=True)
class Opts:
    host: str = option(doc="required host")
    port: int = option(9042, doc="port", minimum=1, maximum=65535)
    ratio: float = option(0.5, doc="a ratio", minimum=0.0, maximum=1.0)
    ssl: bool = option(False, doc="use TLS")
    mode: str = option("fast", doc="mode", choices=("fast", "safe"))
    password: Secret = option(Secret(""), doc="the password")


def test_parses_typed_values_case_insensitively() -> None:
    o = parse_options(Opts, {"HOST": "db", "Port": "1_000", "ratio": "0.25", "ssl": "TRUE", "mode": "safe"})
    assert o == Opts(host="db", port=1000, ratio=0.25, ssl=True, mode="safe")


def test_unknown_option_names_it_suggests_and_lists_valid_ones() -> None:
    with pytest.raises(OptionsError) as info:
        parse_options(Opts, {"host": "h", "prot": "1"}, context="connector 'x'")
    message = str(info.value)
    assert "unknown option 'prot' for connector 'x'" in message
    assert "did you mean 'port'" in message
    assert "host, mode, password, port, ratio, ssl" in message


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("port", "abc", "option 'port': invalid value 'abc'"),
        ("port", "0", "option 'port': '0' is below the minimum 1"),
        ("ratio", "2", "option 'ratio': '2' is above the maximum 1.0"),
        ("ssl", "maybe", "option 'ssl': invalid value 'maybe': expected true or false"),
        ("mode", "slow", "accepted: fast, safe"),
    ],
)
def test_invalid_values_name_the_option(key: str, value: str, needle: str) -> None:
    with pytest.raises(OptionsError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_options(Opts, {"host": "h", key: value})


def test_a_long_bad_value_is_shown_by_its_start_and_length_in_one_line() -> None:
    with pytest.raises(OptionsError) as info:
        parse_options(Opts, {"host": "h", "mode": "x" * 100_000})
    message = str(info.value)
    assert message.startswith("option 'mode': invalid value 'xxxx") and "... (100,000 chars)" in message
    assert len(message) < 200 and "\n" not in message


def test_missing_required_option() -> None:
    with pytest.raises(OptionsError, match="missing required option.*host"):
        parse_options(Opts, {})


def test_secret_never_shown() -> None:
    o = parse_options(Opts, {"host": "h", "password": "hunter2"})
    assert o.password.reveal() == "hunter2"
    assert "hunter2" not in repr(o) and "hunter2" not in str(o)
    with pytest.raises(OptionsError) as info:
        parse_options(Opts, {"host": "h", "password": "hunter2", "port": "x"})
    assert "hunter2" not in str(info.value)


def test_options_are_frozen() -> None:
    o = parse_options(Opts, {"host": "h"})
    with pytest.raises(AttributeError):
        o.port = 1  # type: ignore[misc]


def test_option_tables_are_generated_from_the_declarations() -> None:
    from dataclasses import dataclass

    from splitsource import options_table

    @dataclass(frozen=True)
    class Opts:
        table: str = option(doc="table to read")
        size_mb: float = option(64.0, doc="split size", minimum=1)
        mode: str = option("fast", doc="how", choices=("fast", "slow"))
        secret: Secret = option(Secret("hunter2"), doc="never shown")

    assert options_table(Opts) == "\n".join([
        "| option | default | meaning |",
        "|---|---|---|",
        "| `table` | required | table to read |",
        "| `size_mb` | `64` | split size |",
        "| `mode` | `fast` | how (one of: fast, slow) |",
        "| `secret` | — | never shown |",
    ])
    assert "hunter2" not in options_table(Opts, "text")


def test_the_tables_in_the_docs_are_the_generated_ones() -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "option_tables.py"
    result = subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "5 option tables checked" in result.stdout


def test_the_options_command_lists_a_connectors_options() -> None:
    import subprocess
    import sys

    shown = subprocess.run([sys.executable, "-m", "splitsource.cli", "options", "--connector", "generator"],
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "framework options" in shown.stdout and "sink options" in shown.stdout
    assert "split_rows" in shown.stdout and "max_retry_wait_s" in shown.stdout
    assert "id:bigint" in shown.stdout and "Column(" not in shown.stdout
    unknown = subprocess.run([sys.executable, "-m", "splitsource.cli", "options", "--connector", "nosuch"],
                             capture_output=True, text=True)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1 and "nosuch" in unknown.stderr


@dataclass(frozen=True)
class Listed:
    columns: tuple[str, ...] = option((), doc="columns, each once", parse=name_list, shown="")


def test_a_name_list_is_its_names_each_once_and_one_named_twice_is_refused_naming_it() -> None:
    assert parse_options(Listed, {"columns": " id, name ,"}).columns == ("id", "name")
    assert parse_options(Listed, {}).columns == ()
    with pytest.raises(OptionsError, match=r"^option 'columns': invalid value 'id,name,id': names id more than once$"):
        parse_options(Listed, {"columns": "id,name,id"})
