"""The architecture's rules, checked on the import graph (docs/architecture.md, "Layers").

Read from the source with `ast` (`TYPE_CHECKING` imports too), so a rule breaks here the moment
an import breaks it: no cycle between modules, every package importing only the floors below its
own (composition → edge and control room → runtime → alerts → billing → providers → gateway),
the development tools imported by nothing in the house, the gateway library free of Django and
its pure decisions free of I/O, no module past 400 lines, and only a few function-level imports,
each saying why it can't be at the top.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.project import PACKAGES, ROOT

pytestmark = pytest.mark.backend_free

MAX_LINES = 400
MAX_FUNCTION_IMPORTS = 11

# The house from the top floor down: a module imports project modules only from its own package
# and the floors below its own. Packages on one floor don't import each other.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("failover_site",),  # composition: settings, URLs, the ASGI and Celery entry points
    ("edge", "control_room"),  # the endpoints; the operators' pages
    ("runtime",),  # the serving process: builds the gateway, the snapshot, ledger and jobs
    ("alerts",),  # the control plane: alerts over billing over the provider registry
    ("billing",),
    ("providers",),
    ("gateway",),  # the library every floor above routes with
)
# The tools for drills and development stand beside the house: they may use any floor, and no
# module of the house imports them (their management commands live with them).
TOOLS = "devtools"

# The pure decisions: plain Python over plain data, the clock passed in.
PURE = "gateway.engine"
PURE_MAY_IMPORT = {
    "rapidfuzz",  # the static tier's fuzzy matching: pure computation
    "orjson",  # JSON in and out (gateway/engine/codec.py): pure computation
}
# Packages that do I/O or belong to a framework: none of them in the pure decisions.
IO_AND_FRAMEWORKS = {
    "django", "asgiref", "httpx", "aiohttp", "redis", "celery", "kombu", "psycopg",
    "asyncio", "socket", "ssl", "subprocess", "threading", "urllib", "http",
}  # fmt: skip

# Inside the gateway library, who may import whom: a module in the key's package imports
# library modules only from these packages (and its own).
ENGINE_LAYERS: dict[str, set[str]] = {
    "gateway.engine": set(),
    "gateway.aio": set(),
    "gateway.state": {"gateway.engine", "gateway.aio"},
    "gateway.adapters": {"gateway.engine", "gateway.aio"},
    "gateway.routing": {"gateway.engine", "gateway.state", "gateway.adapters", "gateway.aio"},
    "gateway.sentinel": {
        "gateway.engine", "gateway.state", "gateway.adapters", "gateway.routing",
    },
}  # fmt: skip
# The whole library takes no Django: it runs wherever the engine runs, settings handed in.
DJANGO_FREE = ("gateway",)
ENGINE = ("gateway",)
RUNTIME = "runtime"
EDGES = ("edge", "control_room")  # the endpoints and the control room
CONTROL_PLANE = ("providers",)


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  # the project module, or the top-level name of a library
    line: int
    in_function: bool
    commented: bool


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[_module_name(path)] = path
    return found


SOURCES = _sources()


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _project_module(name: str) -> str | None:
    """The project module `name` is or lies in (a name imported from a module: its module)."""
    while name:
        if name in SOURCES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports_of(module: str, path: Path) -> list[Import]:
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source)
    found: list[Import] = []

    def commented(node: ast.stmt) -> bool:
        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
        return "#" in lines[node.lineno - 1] or above.startswith("#")

    def visit(node: ast.AST, in_function: bool) -> None:
        # Imports under `if TYPE_CHECKING:` count too: a cycle hidden from the interpreter is
        # still a cycle in the design.
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                if isinstance(child, ast.Import):
                    names = [alias.name for alias in child.names]
                else:
                    base = _resolve(module, path.name == "__init__.py", child)
                    names = [f"{base}.{alias.name}" for alias in child.names] or [base]
                for name in names:
                    target = _project_module(name) or name.split(".")[0]
                    found.append(
                        Import(module, target, child.lineno, in_function, commented(child))
                    )
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, inside)

    visit(tree, False)
    return found


IMPORTS = [found for module, path in SOURCES.items() for found in _imports_of(module, path)]


def _project_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {module: set() for module in SOURCES}
    for found in IMPORTS:
        if found.target in SOURCES and found.target != found.importer:
            edges[found.importer].add(found.target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(edges):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return components


def _violations(rule: str, bad: list[Import]) -> str:
    return rule + ":\n" + "\n".join(f"  {i.importer}:{i.line} imports {i.target}" for i in bad)


def test_the_scan_sees_the_whole_project():
    # A guard for the rules below: a scan that found nothing would pass them all.
    assert {"gateway.engine.breaker", "gateway.routing.cascade", "runtime.gateway"} <= set(SOURCES)
    assert {package for package in PACKAGES if package in SOURCES} == set(PACKAGES)
    assert {package for floor in FLOORS for package in floor} | {TOOLS} == set(PACKAGES)
    assert len(IMPORTS) > 300


def test_no_module_imports_another_that_imports_it_back():
    assert _cycles(_project_edges()) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_pure_decisions_import_no_django_and_no_io():
    bad = [
        i
        for i in IMPORTS
        if _within(i.importer, PURE)
        and (i.target in IO_AND_FRAMEWORKS or (i.target not in SOURCES and i.target in PACKAGES))
    ]
    assert not bad, _violations("the engine's pure decisions must stay pure", bad)
    libraries = {i.target for i in IMPORTS if _within(i.importer, PURE) and i.target not in SOURCES}
    assert libraries - set(sys.stdlib_module_names) <= PURE_MAY_IMPORT


def _django_in_the_library(imports: list[Import]) -> list[Import]:
    return [
        i
        for i in imports
        if any(_within(i.importer, layer) for layer in DJANGO_FREE)
        and i.target in ("django", "asgiref")
    ]


def _floor(module: str) -> int | None:
    package = module.split(".")[0]
    return next((n for n, floor in enumerate(FLOORS) if package in floor), None)


def _reaching_up_or_sideways(imports: list[Import]) -> list[Import]:
    """Imports from a floor to its own floor's other packages or to a floor above, and any
    import of the tools from the house."""
    bad = []
    for found in imports:
        if found.target not in SOURCES:
            continue
        source, target = found.importer.split(".")[0], found.target.split(".")[0]
        if source in (target, TOOLS):
            continue
        here, there = _floor(found.importer), _floor(found.target)
        if target == TOOLS or here is None or there is None or there <= here:
            bad.append(found)
    return bad


def _library_layers_reaching_up(imports: list[Import]) -> list[Import]:
    bad = []
    for found in imports:
        layer = next((name for name in ENGINE_LAYERS if _within(found.importer, name)), None)
        if layer is None or found.target not in SOURCES:
            continue
        allowed = ENGINE_LAYERS[layer] | {layer}
        if not any(_within(found.target, name) for name in allowed):
            bad.append(found)
    return bad


def test_each_package_imports_only_the_floors_below_it():
    bad = _reaching_up_or_sideways(IMPORTS)
    assert not bad, _violations("an import runs up or sideways between packages", bad)


def test_the_gateway_library_imports_no_django():
    bad = _django_in_the_library(IMPORTS)
    assert not bad, _violations("Django stays out of the gateway library", bad)


def test_each_library_layer_imports_only_the_layers_below_it():
    bad = _library_layers_reaching_up(IMPORTS)
    assert not bad, _violations("a library layer reaches up or sideways", bad)


def _with_lines_added(module: str, added: str, tmp_path: Path) -> list[Import]:
    """The project's imports as they would be with `added` put at the top of `module`."""
    source = SOURCES[module].read_text(encoding="utf-8")
    head, _, rest = source.partition("\nfrom __future__ import annotations\n")
    changed = tmp_path / SOURCES[module].name
    changed.write_text(f"{head}\nfrom __future__ import annotations\n{added}\n{rest}")
    return [i for i in IMPORTS if i.importer != module] + _imports_of(module, changed)


def test_an_injected_type_checking_cycle_is_caught(tmp_path):
    imports = _with_lines_added(
        "gateway.routing.streams",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from gateway.routing.cascade import RouteResult",
        tmp_path,
    )
    edges: dict[str, set[str]] = {module: set() for module in SOURCES}
    for found in imports:
        if found.target in SOURCES and found.target != found.importer:
            edges[found.importer].add(found.target)
    assert any(
        {"gateway.routing.cascade", "gateway.routing.streams"} <= set(cycle)
        for cycle in _cycles(edges)
    )


def test_an_injected_django_import_in_the_library_is_caught(tmp_path):
    for module in ("gateway.routing.walk", "gateway.adapters.pool"):
        imports = _with_lines_added(module, "from django.conf import settings", tmp_path)
        assert [i.importer for i in _django_in_the_library(imports)] == [module]


def test_an_injected_upward_import_is_caught(tmp_path):
    imports = _with_lines_added(
        "gateway.state.memory_store", "from gateway.routing.walk import Walk", tmp_path
    )
    bad = _library_layers_reaching_up(imports)
    assert [(i.importer, i.target) for i in bad] == [
        ("gateway.state.memory_store", "gateway.routing.walk")
    ]
    imports = _with_lines_added(
        "providers.selectors", "from runtime.gateway import gateway_of", tmp_path
    )
    bad = _reaching_up_or_sideways(imports)
    assert [(i.importer, i.target) for i in bad] == [("providers.selectors", "runtime.gateway")]


def test_an_injected_sideways_import_or_one_of_the_tools_is_caught(tmp_path):
    imports = _with_lines_added(
        "control_room.dashboard", "from edge.api.arrival import arrived", tmp_path
    )
    assert [(i.importer, i.target) for i in _reaching_up_or_sideways(imports)] == [
        ("control_room.dashboard", "edge.api.arrival")
    ]
    imports = _with_lines_added(
        "runtime.gateway", "from devtools.fake_provider import FakeProvider", tmp_path
    )
    assert [(i.importer, i.target) for i in _reaching_up_or_sideways(imports)] == [
        ("runtime.gateway", "devtools.fake_provider")
    ]


def test_billing_and_alerts_never_import_the_library_or_the_runtime():
    forbidden = (*ENGINE, RUNTIME, *EDGES)
    bad = [
        i
        for i in IMPORTS
        if i.importer.split(".")[0] in ("billing", "alerts")
        and any(_within(i.target, name) for name in forbidden)
    ]
    assert not bad, _violations("billing and alerts use only the control-plane models", bad)


def test_no_module_is_over_400_lines():
    long = {
        module: count
        for module, path in SOURCES.items()
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}


def test_function_level_imports_are_few_and_each_says_why():
    inside = [i for i in IMPORTS if i.in_function]
    statements = {(i.importer, i.line) for i in inside}
    assert len(statements) <= MAX_FUNCTION_IMPORTS, sorted(statements)
    silent = sorted({(i.importer, i.line) for i in inside if not i.commented})
    assert silent == [], "a function-level import needs a comment saying why"
