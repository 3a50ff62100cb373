"""A configuration file written to do harm (`manage.py config apply`): refused whole, before
anything of it is built, looked up or written, with a message naming where and no traceback."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from django.core.management import CommandError, call_command

from failover_site.config_file import MAX_FILE_BYTES, ConfigFileError, config_read
from providers.models import Provider, StaticAnswer
from providers.selectors import config_change_high_water
from tests.project import ROOT

# A refusal is the same with --dry-run: nothing is read further, nothing written.
EITHER_RUN = pytest.mark.parametrize("flags", [(), ("--dry-run",)], ids=["apply", "dry-run"])

# Nine levels of nine aliases in a provider's name, in 360-odd bytes: built, it is 9^9 words.
ALIAS_BOMB = (
    "version: 1\nproviders:\n- name:\n"
    + f"  - &a [{','.join(['lol'] * 9)}]\n"
    + "".join(
        f"  - &{name} [{','.join([f'*{below}'] * 9)}]\n"
        for below, name in itertools.pairwise("abcdefghi")
    )
)


def _apply(path: Path, *flags: str) -> str:
    out = io.StringIO()
    call_command("config", "apply", str(path), *flags, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _refused(path: Path, flags: tuple[str, ...]) -> str:
    with pytest.raises(CommandError) as caught:
        _apply(path, *flags)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and message.endswith(" Nothing was applied.")
    return message


def _file(tmp_path: Path, content: str | bytes, name: str = "hostile.yaml") -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


@pytest.mark.backend_free
def test_the_alias_bomb_is_small_and_refused_at_its_first_anchor_before_it_expands():
    assert len(ALIAS_BOMB.encode()) < 400
    # The reader itself refuses it: nothing is built, so nothing is there to expand.
    with pytest.raises(ConfigFileError, match=r"^line 4: an anchor or alias"):
        config_read(ALIAS_BOMB.encode())


@pytest.mark.backend_free
@EITHER_RUN
def test_an_alias_bomb_is_refused_with_the_line_of_its_first_anchor(tmp_path, flags):
    message = _refused(_file(tmp_path, ALIAS_BOMB), flags)
    assert "line 4: an anchor or alias (&name, *name): a configuration file has none" in message


@pytest.mark.backend_free
@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("version: 1\npolicy: &p {cooldown_s: 5}\n", "line 2: an anchor or alias"),
        ("defaults: {timeout_s: 5}\nproviders:\n- <<: *d\n", "line 3: an anchor or alias"),
        ("version: !!int 1\n", "line 1: a tag (tag:yaml.org,2002:int)"),
        ("version: 1\npolicy: {time_zone: 2024-13-45}\n", "not YAML or JSON: month must be in"),
        ("version: 1\npolicy: [1,\n", "not YAML or JSON: line 3, column 1: expected"),
        ('{"version": ' + "9" * 5000 + "}", "a number of more than 4,300 digits"),
    ],
    ids=["anchor", "merge-key-alias", "tag", "impossible-date", "unclosed", "endless-number"],
)
def test_what_no_configuration_file_holds_is_refused_by_the_reader(tmp_path, content, expected):
    assert expected in _refused(_file(tmp_path, content), ())


@pytest.mark.backend_free
@EITHER_RUN
@pytest.mark.parametrize(
    ("content", "name"),
    [
        ("{a: " * 50_000 + "1" + "}" * 50_000, "flow.yaml"),
        ("- " * 50_000 + "x\n", "block.yaml"),
        ("[" * 50_000 + "]" * 50_000, "arrays.json"),
        ('{"a": ' * 50_000 + "1" + "}" * 50_000, "objects.json"),
        ("[" * 40 + "]" * 40, "shallow-for-python.json"),
    ],
    ids=["yaml-flow", "yaml-block", "json-arrays", "json-objects", "json-40-deep"],
)
def test_nesting_past_32_levels_is_refused_in_yaml_and_json(tmp_path, flags, content, name):
    message = _refused(_file(tmp_path, content, name), flags)
    assert "nested deeper than 32 levels." in message


@pytest.mark.backend_free
def test_nesting_to_32_levels_is_read_in_yaml_and_json():
    assert config_read(b"[" * 32 + b"]" * 32) == config_read(b"- " * 31 + b"[]\n")


@pytest.mark.slow
@pytest.mark.backend_free
@pytest.mark.parametrize("content", ["[" + "0," * 50_000 + "0]", "- 0\n" * 50_001])
def test_more_than_50000_values_are_refused(tmp_path, content):
    assert "more than 50,000 values." in _refused(_file(tmp_path, content), ())


@pytest.mark.backend_free
@EITHER_RUN
def test_a_file_past_the_size_cap_is_refused_before_it_is_parsed(tmp_path, flags):
    # A comment past the cap: fine YAML, so only the size refuses it.
    path = _file(tmp_path, "version: 1\n#" + "x" * MAX_FILE_BYTES)
    assert "larger than 4 MiB, the most a configuration file holds." in _refused(path, flags)


@pytest.mark.backend_free
def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    content = "version: 1\npolicy: {currency: é}\n"
    path = _file(tmp_path, content.encode("latin-1"))
    assert f"not UTF-8 text (at byte {content.index('é')})." in _refused(path, ())


# What the database can't store: each refused with its row and field named, nothing written.
FRESH = {"question": "Do you ship on Sundays?", "answer": "No."}
PROVIDER = {"name": "local", "kind": "ollama", "base_url": "http://127.0.0.1:11434"}


@pytest.mark.django_db
@EITHER_RUN
@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            {"static_answers": [FRESH, {"question": "Open?", "answer": "Yes\x00, always."}]},
            "static_answers question='Open?': answer: holds a NUL character (\\x00), which the "
            "database can't store as text.",
        ),
        (
            {"static_answers": [FRESH], "providers": [{**PROVIDER, "name": "lo\x00cal"}]},
            "providers name='lo\\x00cal': name: holds a NUL character (\\x00)",
        ),
        (
            {"static_answers": [FRESH, {"question": "Open?", "answer": "Yes \ud800"}]},
            "static_answers question='Open?': answer: holds a lone surrogate (\\ud800)",
        ),
        (
            {"providers": [{**PROVIDER, "runbook\x00": ""}], "static_answers": [FRESH]},
            "providers name='local': field 'runbook\\x00': holds a NUL character",
        ),
        (
            {
                "providers": [PROVIDER],
                "aliases": [{"name": "fast", "entries": [{"provider": "local\x00"}]}],
            },
            "aliases name='fast': entries[0]: provider: holds a NUL character",
        ),
        (
            {"policy": {"degradation_message": "Back soon\udfff"}, "static_answers": [FRESH]},
            "policy: degradation_message: holds a lone surrogate (\\udfff)",
        ),
    ],
    ids=["nul-answer", "nul-provider-name", "surrogate", "nul-field-name", "nul-entry", "policy"],
)
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_text_the_database_cannot_store_is_refused_naming_row_and_field(
    tmp_path, flags, doc, expected, fmt
):
    doc = {"version": 1, **doc}
    # Both write the characters as escapes: "\0" and "\ud800" in YAML, "\u0000" in JSON.
    text = json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc, allow_unicode=True)
    stand = config_change_high_water()

    message = _refused(_file(tmp_path, text, f"hostile.{fmt}"), flags)

    assert expected in message
    assert not StaticAnswer.objects.filter(question=FRESH["question"]).exists()
    assert not Provider.objects.exists()
    assert config_change_high_water() == stand


@pytest.mark.django_db
def test_a_field_named_by_a_number_is_refused(tmp_path):
    path = _file(tmp_path, "version: 1\nstatic_answers:\n- {question: Open, answer: Yes, 7: x}\n")
    assert "static_answers question='Open': 7: a field's name is text." in _refused(path, ())


@pytest.mark.django_db
def test_a_character_written_in_json_as_an_escaped_pair_is_one_character(tmp_path):
    doc = {"version": 1, "static_answers": [{"question": "Happy?", "answer": "Yes \U0001f600"}]}
    path = _file(tmp_path, json.dumps(doc), "pair.json")  # "\ud83d\ude00", as JSON writes it

    _apply(path)

    assert StaticAnswer.objects.get(question="Happy?").answer == "Yes \U0001f600"


@pytest.mark.slow
@pytest.mark.backend_free
@pytest.mark.parametrize("args", [("FILE", "--dry-run"), ("-",)], ids=["file", "stdin"])
def test_the_command_exits_with_the_reason_and_no_traceback(tmp_path, args):
    path = _file(tmp_path, ALIAS_BOMB)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(ENV_FILE="", DEBUG="true", DATA_DIR=str(tmp_path / "data"))
    argv = [str(path) if arg == "FILE" else arg for arg in args]
    done = subprocess.run(
        [sys.executable, "manage.py", "config", "apply", *argv],
        cwd=ROOT, env=env, input=ALIAS_BOMB, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "line 4: an anchor or alias" in done.stderr
    assert done.stderr.strip().endswith("Nothing was applied.")
