"""The codebase's shape, checked: the data flow's layers (no module imports one above it), no import
cycles, no function of 80 lines or more, and no central object typed ``Any`` (docs/architecture.md).

Imports are read with :mod:`ast`, at module level and inside functions alike (a lazy import is still a
dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "ablate"

#: The data flow, top to bottom: commands -> runner -> worker/tuner -> train -> rewards/models/rl/tasks
#: -> study/plan -> config/registry. A module may import its own layer and the layers below it.
LAYERS: dict[str, int] = {
    "cli": 7, "commands": 7, "__main__": 7, "api": 7,
    "running": 6,
    "train": 4, "engines": 4,
    "rewards": 3, "models": 3, "rl": 3, "tasks": 3,
    "study": 2,
    "config": 1, "registry": 1, "yamlio": 1, "metrics": 1, "cache": 1,
    "errors": 0, "disk": 0, "paths": 0, "states": 0, "objective": 0, "machine": 0, "__init__": 0,
}
#: Modules on their own paths (read and write results, never train): they may import the foundations
#: (layers 0-2) and each other, never the chain above the study (train, worker, tuner, runner, commands).
SIDE = {"store", "tracking", "stats", "report"}
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


def imports(name: str, tree: ast.Module) -> set[str]:
    """The ``ablate`` modules ``name`` imports (at any depth; ``TYPE_CHECKING`` blocks excluded: they
    are annotations, not dependencies)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            skip.update(id(n) for child in node.body for n in ast.walk(child))
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("ablate"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("ablate"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    known = modules_cache()
    return {m for m in out if m in known and m != name}


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


def test_every_module_has_a_place_in_the_layers():
    unplaced = sorted({top(m) for m in modules_cache()} - set(LAYERS) - SIDE)
    assert not unplaced, f"add these to LAYERS or SIDE in {__file__} and docs/architecture.md: {unplaced}"


def test_no_module_imports_one_above_it_in_the_data_flow():
    bad = []
    for name, tree in modules_cache().items():
        mine = level(name)
        for dep in imports(name, tree):
            if top(dep) == top(name) or (name == "ablate" and dep == "ablate.api"):
                continue  # the package re-exports the Python API on first use (ablate/__init__.py's __getattr__)
            theirs = level(dep)
            if top(name) in SIDE:
                if theirs is not None and theirs > 2:
                    bad.append(f"{name} (its own path) imports {dep} (layer {theirs})")
            elif mine is not None and theirs is not None and theirs > mine:
                bad.append(f"{name} (layer {mine}) imports {dep} (layer {theirs})")
            elif mine is not None and mine <= 2 and top(dep) in SIDE:
                bad.append(f"{name} (layer {mine}) imports {dep} (a results-side module)")
    assert not bad, "\n".join(bad)


def test_no_import_cycles_between_modules():
    graph = {name: {d for d in imports(name, tree)} for name, tree in modules_cache().items()}
    # a package's __init__ re-exporting its own submodules is not a cycle of jobs
    for name in graph:
        graph[name] = {d for d in graph[name] if not (d.startswith(name + ".") or name.startswith(d + "."))}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join([*path[path.index(dep):], dep]) if dep in path else f"{node} -> {dep}")
            elif dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


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
