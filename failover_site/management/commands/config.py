"""`manage.py config export [--format yaml|json] [--output FILE]` and
`manage.py config apply FILE [--dry-run] [--prune]`: the configuration as a file
(`failover_site.config_file`, `failover_site.config_apply`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from django.core.management.base import BaseCommand, CommandError, CommandParser

from failover_site.config_apply import changes_text, config_apply
from failover_site.config_file import MAX_FILE_BYTES, ConfigFileError, config_export, config_read


class Command(BaseCommand):
    help = "Export the configuration to a file, or apply one (all or nothing, audited)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        export = actions.add_parser("export", help="Write the configuration (stdout by default).")
        export.add_argument("--format", choices=("yaml", "json"), default="yaml")
        export.add_argument("--output", "-o", help="Write to this file instead of stdout.")
        apply = actions.add_parser("apply", help="Make the database hold what FILE says.")
        apply.add_argument("file", help="A file `config export` wrote (YAML or JSON); - for stdin.")
        apply.add_argument(
            "--dry-run", action="store_true", help="Show what would change; write nothing."
        )
        apply.add_argument(
            "--prune",
            action="store_true",
            help="Also delete the rows the file leaves out (a client app's key is revoked).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "export":
            self._export(options["format"], options.get("output"))
        else:
            self._apply(options["file"], dry_run=options["dry_run"], prune=options["prune"])

    def _export(self, fmt: str, output: str | None) -> None:
        doc = config_export()
        if fmt == "json":
            text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        else:
            text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)
        if output:
            Path(output).write_text(text, encoding="utf-8")
            self.stderr.write(f"configuration written to {output}")
        else:
            self.stdout.write(text, ending="")

    def _apply(self, file: str, *, dry_run: bool, prune: bool) -> None:
        try:
            # One byte past the most a file may hold is enough for config_read to refuse it.
            if file == "-":
                data = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
            else:
                with Path(file).open("rb") as stream:
                    data = stream.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise CommandError(f"{file}: {exc.strerror}") from None
        source = "standard input" if file == "-" else Path(file).name
        try:
            doc = config_read(data)
            applied = config_apply(doc, source=source, prune=prune, dry_run=dry_run)
        except ConfigFileError as exc:
            raise CommandError(f"{file}: {exc} Nothing was applied.") from None
        if applied.changes:
            self.stdout.write(changes_text(applied.changes))
        verb = "would change" if dry_run else "changed"
        self.stdout.write(f"{len(applied.changes)} rows {verb}" + (" (dry run)" if dry_run else ""))
        for name, key in applied.keys.items():
            self.stdout.write(
                f"client app {name}: its key, shown this once: {key}", style_func=self.style.WARNING
            )
