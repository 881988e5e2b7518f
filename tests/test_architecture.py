"""The codebase's shape, checked: the packages as layers (no module imports a package above its own layer,
and the two columns, training and judging, never import each other), no import cycles, a small top level, no
function of 80 lines or more, and no central object typed ``Any`` (docs/architecture.md, whose picture of the
layers is checked against :data:`LAYERS`).

Imports are read with :mod:`ast`, at module level, inside functions (a lazy import is still a dependency) and
under ``if TYPE_CHECKING:`` (a type-only import is a dependency too: it may never close a cycle between
packages, nor point up the layers)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ablate"

#: Each top-level module and package of ablate/ -> its layer, top to bottom: the faces, running a study, the
#: two columns (training: engines, train, the components; judging: report, stats, tracking), the study store,
#: studies, the configuration, the shared foundations. A module may import its own layer and the layers below.
LAYERS: dict[str, int] = {
    "cli": 8, "commands": 8, "__main__": 8, "api": 8,
    "running": 7,
    "engines": 6, "report": 6,
    "train": 5, "stats": 5,
    "tasks": 4, "models": 4, "rewards": 4, "rl": 4, "tracking": 4,
    "store": 3,
    "study": 2,
    "config": 1,
    "errors": 0, "paths": 0, "disk": 0, "states": 0, "objective": 0, "machine": 0, "registry": 0, "yamlio": 0,
    "metrics": 0, "cache": 0, "__init__": 0,
}
#: The two columns between running a study and the study store: training a trial, and judging the results.
#: Neither imports the other (running a study uses both).
COLUMNS: dict[str, set[str]] = {
    "training": {"engines", "train", "tasks", "models", "rewards", "rl"},
    "judging": {"report", "stats", "tracking"},
}
#: The most modules the top level of ablate/ holds (the small shared foundations and the faces).
MAX_TOP_LEVEL_MODULES = 15
#: Type-only imports that close a cycle inside one package, each with its reason (a type-only import never
#: closes a cycle between packages; a runtime or lazy import never closes one at all).
TYPE_ONLY_CYCLES_ALLOWED: dict[frozenset[str], str] = {
    frozenset({"ablate.config.rules", "ablate.config.schema"}):
        "the schema's validator runs the cross-field rules; the rules annotate the TrialConfig they check",
}
#: The longest a function may be, in lines (its ``def`` to its last line).
MAX_FUNCTION_LINES = 80
#: Parameter names that carry a central object, and may therefore never be typed ``Any``.
CENTRAL = ("study", "plan", "spec", "tracker", "config", "arm", "tune", "store", "results", "settings", "logger")


def modules() -> dict[str, ast.Module]:
    """Dotted module name (``ablate.x.y``) -> its parsed source."""
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(encoding="utf-8"))
    return out


def import_edges(name: str, tree: ast.Module) -> dict[str, bool]:
    """The ``ablate`` modules ``name`` imports (at any depth) -> whether only for types (every import of it
    under ``if TYPE_CHECKING:``)."""
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            typing_only.update(id(n) for child in node.body for n in ast.walk(child))
    out: dict[str, bool] = {}
    known = modules_cache()
    for node in ast.walk(tree):
        found: list[str] = []
        if isinstance(node, ast.Import):
            found = [a.name for a in node.names if a.name.startswith("ablate")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("ablate"):
            found = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for m in found:
            if m in known and m != name:
                out[m] = out.get(m, True) and id(node) in typing_only
    return out


def imports(name: str, tree: ast.Module, *, types: bool = False) -> set[str]:
    """The ``ablate`` modules ``name`` imports at runtime (module level or lazily), and with ``types`` also
    those it imports only for annotations."""
    return {m for m, typing_only in import_edges(name, tree).items() if types or not typing_only}


_CACHE: dict[str, ast.Module] = {}


def modules_cache() -> dict[str, ast.Module]:
    if not _CACHE:
        _CACHE.update(modules())
    return _CACHE


def top(name: str) -> str:
    """``ablate.store.queue`` -> ``store``; ``ablate`` -> ``__init__``."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def level(name: str) -> int | None:
    return LAYERS.get(top(name))


def column(name: str) -> str | None:
    return next((c for c, members in COLUMNS.items() if top(name) in members), None)


def test_every_module_has_a_place_in_the_layers():
    unplaced = sorted({top(m) for m in modules_cache()} - set(LAYERS))
    assert not unplaced, f"add these to LAYERS in {__file__} and to docs/architecture.md's layers: {unplaced}"
    assert not set(LAYERS) - {top(m) for m in modules_cache()}, "LAYERS names a module that is gone"


def test_no_module_imports_a_package_above_its_layer():
    """Type-only imports included; the package's lazy re-export of the Python API (``ablate.__getattr__``) is
    the one exception."""
    bad = []
    for name, tree in modules_cache().items():
        for dep in imports(name, tree, types=True):
            if top(dep) == top(name) or (name == "ablate" and dep == "ablate.api"):
                continue
            if level(dep) > level(name):
                bad.append(f"{name} (layer {level(name)}) imports {dep} (layer {level(dep)})")
            elif column(name) and column(dep) and column(name) != column(dep):
                bad.append(f"{name} ({column(name)}) imports {dep} ({column(dep)}): the columns never import each other")
    assert not bad, "\n".join(bad)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph(*, types: bool) -> dict[str, set[str]]:
    """Module -> the modules it imports; a package's ``__init__`` re-exporting its own submodules (and a
    submodule importing its package) is not a cycle of jobs."""
    graph = {name: imports(name, tree, types=types) for name, tree in modules_cache().items()}
    return {name: {d for d in deps if not (d.startswith(name + ".") or name.startswith(d + "."))}
            for name, deps in graph.items()}


def test_no_import_cycles_between_modules():
    """Runtime and lazy imports: no cycle at all."""
    found = cycles(import_graph(types=False))
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_no_type_only_import_closes_a_cycle_between_packages():
    """With the type-only imports: no cycle between packages, and inside one only those allowed (with reasons)."""
    found = cycles(import_graph(types=True))
    between = [c for c in found if len({top(m) for m in c}) > 1]
    assert not between, "\n".join(" <-> ".join(c) for c in between)
    assert {frozenset(c) for c in found} == set(TYPE_ONLY_CYCLES_ALLOWED), found


def test_the_top_level_is_small():
    """ablate/ holds at most 15 modules beside its packages: the shared foundations and the faces."""
    top_level = sorted(p.stem for p in ROOT.glob("*.py"))
    assert len(top_level) <= MAX_TOP_LEVEL_MODULES, top_level
    assert set(top_level) <= {k for k, v in LAYERS.items() if v in (0, 8)}, top_level


def test_no_module_is_named_as_a_public_api_name():
    """A subpackage or module becomes an attribute of :mod:`ablate` once imported: one named ``run`` would
    hide ``ablate.run`` (the API's function, served by ``ablate.__getattr__``)."""
    import ablate

    names = {p.stem for p in ROOT.glob("*.py")} | {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert len(names) > 20 and not names & set(ablate.__all__), names & set(ablate.__all__)


def test_the_engine_seam_knows_no_engine_and_the_configuration_no_engine_module():
    """The seam (engines/base.py) reaches its engines through the registry they join; the configuration asks
    an engine what it refuses through ``registry.engine_registry``, never importing the engines."""
    tree = modules_cache()
    assert not [d for d in imports("ablate.engines.base", tree["ablate.engines.base"], types=True)
                if d.startswith("ablate.engines")]
    assert not [(n, d) for n, t in tree.items() if top(n) == "config" for d in imports(n, t, types=True)
                if top(d) == "engines"]


def test_the_architecture_page_draws_these_layers():
    """docs/architecture.md's table of layers names each package and module in the layer :data:`LAYERS` gives."""
    text = (ROOT.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    drawn: dict[str, int] = {}
    for row in re.findall(r"^\| (\d) [^|]+\| ([^|]+) \|", text, re.M):
        for name in re.findall(r"`([\w]+)(?:/|\.py)`", row[1]):
            drawn[name] = int(row[0])
    assert drawn == LAYERS, {k: (drawn.get(k), LAYERS.get(k)) for k in set(drawn) | set(LAYERS)
                             if drawn.get(k) != LAYERS.get(k)}


def benchmark_scripts() -> dict[str, ast.Module]:
    """``benchmarks.x`` -> its parsed source, for each script of benchmarks/ (not a package: no imports checked)."""
    return {f"benchmarks.{p.stem}": ast.parse(p.read_text(encoding="utf-8"))
            for p in sorted((ROOT.parent / "benchmarks").glob("*.py"))}


def test_no_function_reaches_80_lines():
    """ablate/ and the benchmark scripts alike."""
    long = []
    for name, tree in {**modules_cache(), **benchmark_scripts()}.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n >= MAX_FUNCTION_LINES:
                    long.append(f"{name}.{node.name}: {n} lines")
    assert not long, "\n".join(long)


#: The orchestration: its functions pass the session and small typed values, not long parameter lists (the
#: pure math in rl/ keeps its keyword options, as verl's core_algos does).
ORCHESTRATION = ("ablate.running", "ablate.engines.base", "ablate.tracking", "ablate.train.population")
#: The most parameters an orchestration function takes (``self`` and ``cls`` not counted).
MAX_PARAMETERS = 7


def test_no_orchestration_function_takes_more_than_7_parameters():
    wide = []
    for name, tree in modules_cache().items():
        if not any(name == m or name.startswith(m + ".") for m in ORCHESTRATION):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []),
                          *([a.kwarg] if a.kwarg else [])]
                n = sum(p.arg not in ("self", "cls") for p in params)
                if n > MAX_PARAMETERS:
                    wide.append(f"{name}.{node.name}: {n} parameters")
    assert len(modules_cache()) > 50 and any(n.startswith("ablate.running.attempt") for n in modules_cache())
    assert not wide, "\n".join(wide)


def test_the_runner_the_worker_and_each_tracking_module_stay_under_500_lines():
    """The orchestration's two entry modules hold the loop, not everything around it (session, preflight,
    attempt, pool and engine have their own modules); tracking is a package split by responsibility."""
    files = [ROOT / "running" / "runner.py", ROOT / "running" / "worker.py", *sorted((ROOT / "tracking").glob("*.py"))]
    sizes = {f.relative_to(ROOT).as_posix(): len(f.read_text(encoding="utf-8").splitlines()) for f in files}
    assert len(sizes) >= 6 and all(n < 500 for n in sizes.values()), sizes


def test_no_central_object_is_typed_any():
    bad = []
    for name, tree in modules_cache().items():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                if arg.annotation is not None and ast.unparse(arg.annotation) in ("Any", "Any | None"):
                    if any(arg.arg == c or arg.arg.endswith("_" + c) for c in CENTRAL):
                        bad.append(f"{name}.{node.name}({arg.arg}: {ast.unparse(arg.annotation)})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", ["docs/architecture.md"])
def test_the_architecture_page_names_every_module(doc):
    text = (ROOT.parent / doc).read_text(encoding="utf-8")
    missing = sorted({top(m) for m in modules_cache() if top(m) != "__init__"} - {w.strip("`/.py") for w in
                                                                                 text.split() if w.startswith("`")})
    missing = [m for m in missing if f"`{m}" not in text and f"{m}/" not in text and f"{m}.py" not in text]
    assert not missing, f"{doc} does not mention: {missing}"
    below = sorted(p.relative_to(ROOT).as_posix() for p in ROOT.glob("*/*.py") if p.name != "__init__.py")
    unnamed = [f for f in below if f"`{f.split('/')[1]}`" not in text and f"`{f.split('/')[1][:-3]}`" not in text]
    assert len(below) > 80 and not unnamed, f"{doc} names no row for: {unnamed}"


def _is_private(name: str) -> bool:
    """``_x`` and ``__x`` are another module's own; ``__x__`` (a dunder) is Python's."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _ablate_bindings(tree: ast.Module) -> dict[str, str]:
    """Each local name an ``ablate`` import binds -> what it names (``import ablate.x as m``,
    ``from ablate import x``, ``from ablate.x import Y``; a bare ``import ablate.x`` binds ``ablate``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "ablate" or a.name.startswith("ablate."):
                    out[a.asname or a.name.split(".")[0]] = a.name if a.asname else "ablate"
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("ablate"):
            out.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names})
    return out


def private_uses(name: str, tree: ast.Module) -> list[tuple[str, str]]:
    """(module, ``what``) for each private name of another ablate module that ``name`` reaches for: a
    ``from ablate.x import _y``, or ``m._y`` / ``getattr(m, "_y")`` on a name an ablate import bound
    (a module, a class or a function of another module)."""
    bound = _ablate_bindings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and (node.level or node.module.startswith("ablate")):
            module = "." * node.level + node.module
            out += [(name, f"from {module} import {a.name}") for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.Attribute) and _is_private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):  # ablate.x.y._z: the chain's root is the import
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                out.append((name, f"{ast.unparse(node)} ({bound[base.id]})"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[0], ast.Name) and node.args[0].id in bound
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value)):
            out.append((name, f"{ast.unparse(node)} ({bound[node.args[0].id]})"))
    return out


#: (module, use) pairs tolerated for now, each with the reason; empty: no module reaches into another.
PRIVATE_USES_ALLOWED: set[tuple[str, str]] = set()


def test_no_module_uses_another_modules_private_names():
    """A name with a leading underscore is its module's own: another module that needs it needs it
    public (renamed without the underscore), so that what a module offers is what it names."""
    bad = [f"{m}: {what}" for name, tree in modules_cache().items() for m, what in private_uses(name, tree)
           if (m, what) not in PRIVATE_USES_ALLOWED]
    assert not bad, "make these names public (no leading underscore) where they are defined:\n" + "\n".join(bad)
