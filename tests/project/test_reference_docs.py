"""The reference documentation says what the code does, both ways: every command, option,
setting and metric of the code is in docs/ (the generated parts, ``tests/support/reference.py``),
and every one a document names, generated or written by hand, exists. The README stays short
enough for a newcomer: the reference lives in docs/."""

from __future__ import annotations

import re
import shlex

import pytest

from cleanerd.config._sources import KNOWN, SPARK_CONF_PREFIX
from cleanerd.service._metrics_doc import METRICS_DOC
from cleanerd.topics._catalog import TOPIC_SETTINGS
from tests.support import reference

REPO = reference.REPO
README = REPO / "README.md"
# CHANGELOG.md is left out: it names what a version removed
HAND_WRITTEN = (
    README,
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "config" / "README.md",
    *sorted((REPO / "deploy").rglob("*.md")),
)
PACKAGES = {p.name for p in (REPO / "cleanerd").iterdir() if (p / "__init__.py").is_file()}
FILE_SUFFIXES = (".toml", ".yml", ".json", ".service", ".conf", ".log", ".properties", ".md")
HOST_SUFFIXES = (".com", ".org", ".net", ".local", ".internal")
SERIES_SUFFIXES = ("_bucket", "_sum", "_count")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def code_texts(text: str) -> list[str]:
    """The lines of fenced blocks and the inline code spans of a Markdown text."""
    blocks = FENCE.findall(text)
    lines = [line for block in blocks for line in re.sub(r"\\\n\s*", " ", block).splitlines()]
    outside = FENCE.sub("", text)
    return lines + CODE_SPAN.findall(outside)


def test_every_generated_part_is_as_the_code_says() -> None:
    stale = [
        f"{document.relative_to(REPO)}: {name}"
        for document in reference.DOCUMENTS
        for name, body in reference.regions(document.read_text())
        if body != reference.render(name)
    ]
    assert stale == [], "run `python -m tests.support.reference` to rewrite: " + ", ".join(stale)


def test_every_command_setting_and_metric_has_its_generated_part_once() -> None:
    found = [name for d in reference.DOCUMENTS for name, _ in reference.regions(d.read_text())]
    assert sorted(found) == sorted(reference.names())


def test_a_stale_part_is_caught() -> None:
    """The check can fail: an option the code no longer has, or a metric added to the code."""
    text = (REPO / "docs" / "commands.md").read_text()
    body = dict(reference.regions(text))["help compact"]
    stale = text.replace(body, body.replace("--roll-active", "--roll-everything"), 1)
    assert reference.refreshed(stale) == text
    assert reference.refreshed(stale) != stale
    with pytest.raises(KeyError):
        reference.render("help no-such-command")


def named_commands(text: str) -> list[tuple[tuple[str, ...], list[str]]]:
    """Each ``cleanerd COMMAND [SUB] ARGS`` in the code of ``text``: the command path as far as
    it names commands, and the option words after it (to the end of that command)."""
    found = []
    groups = {path[0] for path in reference.command_paths() if len(path) == 2}
    for code in code_texts(text):
        for match in re.finditer(r"(?:^|[\s/(])cleanerd ((?:[a-z][\w-]*)(?: [a-z][\w-]*)?)", code):
            rest = re.split(r"\s(?:\||&&|;|#|>|2>)\s?", code[match.end() :], maxsplit=1)[0]
            words = match.group(1).split()
            path = tuple(words[:2]) if words[0] in groups and len(words) == 2 else (words[0],)
            try:
                argv = shlex.split(rest)
            except ValueError:
                argv = rest.split()
            found.append((path, [w.split("=")[0] for w in argv if w.startswith("--")]))
    return found


def test_every_command_and_option_a_document_names_exists() -> None:
    paths = set(reference.command_paths())
    problems = []
    for document in HAND_WRITTEN:
        for named, options in named_commands(document.read_text()):
            where = f"{document.relative_to(REPO)}: cleanerd {' '.join(named)}"
            path = named if named in paths else named[:1]
            if path not in paths:  # "cleanerd compacts ..." in prose: no command
                continue
            known = reference.options(path)
            if len(path) == 1:  # a group named alone: its subcommands' options too
                known |= {
                    o for p in paths if p[:1] == path and len(p) == 2 for o in reference.options(p)
                }
            problems += [
                f"{where} {option}: no such option" for option in options if option not in known
            ]
    assert problems == []


def test_the_command_check_can_fail() -> None:
    text = (
        "run `cleanerd compact --no-such-flag LOGDIR` then\n```sh\ncleanerd plan --now 5 x\n```\n"
    )
    found = named_commands(text)
    assert (("compact",), ["--no-such-flag"]) in found
    assert (("plan",), ["--now"]) in found
    assert "--no-such-flag" not in reference.options(("compact",))


def test_every_setting_a_document_names_exists() -> None:
    topic_names = {s.name for s in TOPIC_SETTINGS}
    problems = []
    for document in HAND_WRITTEN:
        for span in CODE_SPAN.findall(document.read_text()):
            name = span.split("=")[0].strip().strip('"')
            if not re.fullmatch(r"(log|cleanerd)\.[a-z0-9.]+[a-z0-9]", name):
                continue
            if name.endswith(FILE_SUFFIXES + HOST_SUFFIXES) or name.split(".")[1] in PACKAGES:
                continue  # a file (cleanerd.toml), a host or a module (cleanerd.spark.executor)
            if name in KNOWN or name in topic_names or name.startswith(SPARK_CONF_PREFIX):
                continue
            problems.append(f"{document.relative_to(REPO)}: {name}")
    assert problems == []


def test_every_metric_a_document_names_exists() -> None:
    exposed = {d.name for d in METRICS_DOC}
    # the process collector's and the prometheus rules' own names are not cleanerd_ series
    problems = []
    for document in HAND_WRITTEN:
        for name in set(re.findall(r"\bcleanerd_[a-z0-9_]+\b", document.read_text())):
            base = next((name.removesuffix(s) for s in SERIES_SUFFIXES if name.endswith(s)), name)
            if name not in exposed and base not in exposed:
                problems.append(f"{document.relative_to(REPO)}: {name}")
    assert problems == []


def test_the_readme_fits_a_newcomer() -> None:
    """Under 150 lines, and no table cell a page long (the reference is in docs/)."""
    lines = README.read_text().splitlines()
    assert len(lines) < 150
    cells = [c for line in lines if line.startswith("|") for c in line.strip("|").split(" | ")]
    assert max(len(c) for c in cells) <= 300
