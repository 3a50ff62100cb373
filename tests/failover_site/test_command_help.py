"""Every management command the project defines answers `--help` (and `manage.py help NAME`)
with its help text, subcommands included: argparse formats help strings with `%`, so one bare
`%` in a help text turns the help into a traceback."""

from __future__ import annotations

import argparse

import pytest
from django.core.management import ManagementUtility, get_commands, load_command_class
from django.core.management.base import BaseCommand, CommandParser

from tests.project import PACKAGES

pytestmark = pytest.mark.backend_free

PROJECT_APPS = PACKAGES


def project_commands() -> dict[str, str]:
    """The project's own commands by name, with the app each comes from (not Django's, nor a
    third party's)."""
    return {
        name: app
        for name, app in sorted(get_commands().items())
        if isinstance(app, str) and app.split(".")[0] in PROJECT_APPS
    }


def parsers_of(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, CommandParser]]:
    """The parser and every subcommand's (`clientapp create`), each with the words that reach it."""
    found: list[tuple[str, CommandParser]] = [(path, parser)]  # type: ignore[list-item]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word, subparser in action.choices.items():
                found.extend(parsers_of(subparser, f"{path} {word}"))
    return found


def help_texts(command: BaseCommand, name: str) -> dict[str, str]:
    """What `manage.py NAME [SUBCOMMAND] --help` prints, for the command and each subcommand."""
    parser = command.create_parser("manage.py", name)
    return {path: sub.format_help() for path, sub in parsers_of(parser, name)}


def test_the_project_defines_the_commands_the_docs_name():
    # A guard for the test below: a discovery that found nothing would pass it.
    assert {"roi", "report", "clientapp", "bootstrap", "drill", "fakeprovider", "fakereceiver"} <= (
        set(project_commands())
    )
    assert "migrate" not in project_commands()


@pytest.mark.parametrize(("name", "app"), list(project_commands().items()))
def test_every_project_command_prints_its_help(name, app):
    texts = help_texts(load_command_class(app, name), name)
    for path, text in texts.items():
        assert text.startswith("usage: manage.py " + path), text
    command = load_command_class(app, name)
    if command.help:
        # The command's own description, as argparse wraps it.
        assert command.help.split()[0] in texts[name]


def test_manage_py_help_runs_for_a_command(capsys):
    ManagementUtility(["manage.py", "help", "roi"]).execute()
    assert "--input-share" in capsys.readouterr().out


def test_a_bare_percent_in_a_help_text_is_caught():
    class Broken(BaseCommand):
        help = "A command."

        def add_arguments(self, parser: CommandParser) -> None:
            actions = parser.add_subparsers(dest="action")
            actions.add_parser("sub").add_argument("--share", help="A share, in %.")

    with pytest.raises((ValueError, TypeError)):
        help_texts(Broken(), "broken")
