"""The documentation matches the code: the configuration page and .env.example name every
variable the settings read, every file, folder and module the documents name exists, and the
README stays a short page that links every page of docs/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.project import PACKAGES, ROOT

pytestmark = pytest.mark.backend_free

SETTINGS = (ROOT / "failover_site" / "settings.py").read_text()
READ_IN_SETTINGS = set(re.findall(r"""env(?:\.\w+)?\(\s*["']([A-Z_]+)["']""", SETTINGS)) | set(
    re.findall(r"""os\.environ\.get\(\s*["']([A-Z_]+)["']""", SETTINGS)
)

DOCUMENTS = ("README.md", "bench/README.md") + tuple(
    sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md"))
)
README = (ROOT / "README.md").read_text(encoding="utf-8")
README_MAX_LINES = 200
# A path the documents give from the repository's root starts with one of these.
ROOTS = (
    *PACKAGES,
    "tests",
    "bench",
    "templates",
    "static",
    "docs",
)
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(ROOTS)})/[\w./-]*)")
# A module named in backticks, maybe with an attribute: `gateway.adapters.pool.MAX_CONNECTIONS`.
MODULE = re.compile(rf"`((?:{'|'.join(PACKAGES)})(?:\.\w+)+)`")


def paths_named(text: str) -> set[str]:
    return {match.rstrip(".,") for match in PATH.findall(text)}


def missing_paths(text: str, root: Path = ROOT) -> set[str]:
    return {path for path in paths_named(text) if not (root / path).exists()}


def _module_file(parts: list[str], root: Path) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defines(source: str, name: str) -> bool:
    defined = rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*[:=]"
    imported = rf"^\s*from\s.+\bimport\b.*\b{name}\b"
    return bool(re.search(f"{defined}|{imported}", source, re.M))


def missing_modules(text: str, root: Path = ROOT) -> set[str]:
    """Dotted names whose module doesn't exist, or whose module doesn't define what follows it."""
    missing = set()
    for dotted in set(MODULE.findall(text)):
        parts = dotted.split(".")
        found = next(
            (
                (n, path)
                for n in range(len(parts), 0, -1)
                if (path := _module_file(parts[:n], root)) is not None
            ),
            None,
        )
        if found is None:
            missing.add(dotted)
            continue
        n, path = found
        if n < len(parts) and not _defines(path.read_text(encoding="utf-8"), parts[n]):
            missing.add(dotted)
    return missing


def test_the_settings_read_what_the_documentation_expects():
    assert {"DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= READ_IN_SETTINGS


def test_env_example_lists_every_variable():
    listed = set(re.findall(r"^#? ?([A-Z_]+)=", (ROOT / ".env.example").read_text(), re.M))
    assert READ_IN_SETTINGS - listed == set()


def test_the_configuration_page_lists_every_variable():
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert {name for name in READ_IN_SETTINGS if f"`{name}`" not in page} == set()


def test_the_readme_points_at_the_architecture():
    assert "docs/architecture.md" in README


def test_the_readme_is_short_and_links_every_page_of_docs():
    assert len(README.splitlines()) < README_MAX_LINES
    pages = sorted(path.name for path in (ROOT / "docs").glob("*.md"))
    assert {"architecture.md", "configuration.md", "api.md", "operations.md"} <= set(pages)
    assert [page for page in pages if f"](docs/{page})" not in README] == []


def test_every_document_is_checked():
    # A guard for the glob: a pattern that found no page would leave docs/ unchecked.
    assert {"README.md", "bench/README.md", "docs/architecture.md", "docs/api.md"} <= set(DOCUMENTS)


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_path_a_document_names_exists(document):
    assert missing_paths((ROOT / document).read_text(encoding="utf-8")) == set()


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_module_a_document_names_exists(document):
    assert missing_modules((ROOT / document).read_text(encoding="utf-8")) == set()


def test_the_architecture_names_the_files_it_describes():
    # A guard for the checks above: a pattern that matched nothing would pass them all.
    named = paths_named((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert {"gateway/routing/cascade.py", "runtime/outcomes.py"} <= named
    assert len(named) > 50


def test_a_moved_file_or_module_is_caught(tmp_path):
    (tmp_path / "gateway" / "adapters").mkdir(parents=True)
    (tmp_path / "gateway" / "__init__.py").write_text("")
    (tmp_path / "gateway" / "adapters" / "__init__.py").write_text("")
    (tmp_path / "gateway" / "adapters" / "pool.py").write_text("class AdapterPool:\n    pass\n")
    text = (
        "See `gateway/adapters/pool.py`, gateway/jobs.py and `gateway/adapters/`. "
        "`gateway.adapters.pool.AdapterPool`, `gateway.pool`, `gateway.adapters.pool.Gone`."
    )
    assert missing_paths(text, tmp_path) == {"gateway/jobs.py"}
    assert missing_modules(text, tmp_path) == {"gateway.pool", "gateway.adapters.pool.Gone"}
