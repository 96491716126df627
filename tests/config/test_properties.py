"""``--kafka-properties`` files read the way ``java.util.Properties.load`` reads them.

A broker's ``server.properties`` is handed over as is, so every escape, continuation and
comment form Java accepts must mean the same here, and a broken file must be named in the error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cleanerd.config import ConfigError, load_config
from cleanerd.config._sources import parse_properties


def pairs(text: str) -> dict[str, str]:
    return {key: value for key, value, _line in parse_properties(text)}


def test_unicode_escapes() -> None:
    assert pairs("a=caf\\u00e9\n") == {"a": "café"}
    assert pairs("k\\u00e9y=v\n") == {"kéy": "v"}  # keys too
    assert pairs("smile=\\ud83d\\ude00\n") == {"smile": "\U0001f600"}  # a surrogate pair
    assert pairs("A=\\u0041\\u0042\n") == {"A": "AB"}


def test_character_escapes() -> None:
    assert pairs("t=a\\tb\nn=a\\nb\nb=a\\\\b\nr=a\\rb\nf=a\\fb\n") == {
        "t": "a\tb",
        "n": "a\nb",
        "b": "a\\b",
        "r": "a\rb",
        "f": "a\fb",
    }
    # any other escaped character stands for itself, as in Java
    assert pairs("q=\\q\\#\\!\n") == {"q": "q#!"}


def test_line_continuations() -> None:
    text = "list=one,\\\n     two,\\\n\tthree\nnext=1\n"
    assert pairs(text) == {"list": "one,two,three", "next": "1"}
    # an even number of trailing backslashes is an escaped backslash, not a continuation
    assert pairs("a=x\\\\\nb=y\n") == {"a": "x\\", "b": "y"}
    # a continued key
    assert pairs("log.cleaner.\\\n   threads=3\n") == {"log.cleaner.threads": "3"}


def test_comments() -> None:
    text = "# hash\n! bang\n   # indented\nk=v # not a comment\nj=#value\n"
    assert pairs(text) == {"k": "v # not a comment", "j": "#value"}
    # a comment line ending in a backslash does not continue
    assert pairs("# note \\\nk=v\n") == {"k": "v"}


def test_separators() -> None:
    assert pairs("a=1\nb:2\nc 3\nd = 4\ne : 5\nf\t6\ng\n") == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "4",
        "e": "5",
        "f": "6",
        "g": "",
    }
    # only the first separator splits; the rest belong to the value
    assert pairs("url=http://h:1/p=q\n") == {"url": "http://h:1/p=q"}
    # a blank then '=' is one separator, the '=' is not part of the value
    assert pairs("k   =   v\n") == {"k": "v"}


def test_escaped_separators_in_keys() -> None:
    assert pairs("a\\=b=1\nc\\:d:2\ne\\ f 3\n") == {"a=b": "1", "c:d": "2", "e f": "3"}


def test_line_numbers_are_where_each_entry_starts() -> None:
    text = "# c\n\na=1\nb=two,\\\n  three\nc=3\r\nd=4\n"
    assert [line for _k, _v, line in parse_properties(text)] == [3, 4, 6, 7]


def test_bad_unicode_escape_names_the_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_properties("a=1\nb=\\u00zz\n")


def test_escapes_reach_the_config(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("cleanerd.admin.token=caf\\u00e9\\tbar\nlog.cleaner.\\\n  threads = 2\n")
    loaded = load_config(kafka_properties=props, env={})
    assert loaded.config.admin_token == "café\tbar"
    assert loaded.config.threads == 2
    assert loaded.origins["log.cleaner.threads"] == f"kafka-properties {props}"


def test_bad_file_is_named(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("log.cleaner.threads=2\nbroken=\\u12\n")
    with pytest.raises(ConfigError) as info:
        load_config(kafka_properties=props, env={})
    (problem,) = info.value.problems
    assert problem.source == f"kafka-properties {props}"
    assert "line 2" in problem.rule
    assert str(props) in str(info.value)
