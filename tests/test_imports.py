"""No import cycle among ccoverlap's modules: each module's imports, read with `ast` (imports inside
functions included: a lazy import hides a cycle, it does not remove one), form a graph with no cycle; and no
import points up a layer (LAYERS, as docs/ARCHITECTURE.md draws it)."""
from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import ccoverlap

PACKAGE = Path(ccoverlap.__file__).parent

#: ccoverlap's packages from the bottom up (docs/ARCHITECTURE.md): a module imports its own package's modules and
#: those of lower layers only, none of its own layer's other packages. "ccoverlap" is the package's own front
#: (ccoverlap/__init__.py: the model's names, __version__, enable).
LAYERS = (
    ("util", "examples"),
    ("gpu",),
    ("model",),
    ("control",),
    ("ccoverlap",),
    ("analysis", "lab"),
    ("bench", "doctor", "whatif"),
    ("tune",),
    ("cli",),
    ("__main__",),
)


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py below `root` (a package directory)."""
    out = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of `known` that module `name` imports anywhere in its body.

    `from a import b` depends on a.b where that is a module, else on a (its body must have run);
    an import of another package's module names the nearest known package above it, or nothing.
    `import a.b` and `from a import b` (b a module) do not depend on the body of the parent package
    a: Python runs it first, and a package's __init__ importing its children would otherwise read
    as a cycle. `from a import name` does, parent or not.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if _type_checking(block) for n in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` imports never run
            continue
        if isinstance(node, ast.Import):
            targets = [(alias.name, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [(f"{base}.{a.name}", False) if f"{base}.{a.name}" in known else (base, True) for a in node.names]
        else:
            continue
        for target, needs_body in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and (needs_body or not name.startswith(target + ".")):
                found.add(target)
    return found


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None (depth-first search, colouring nodes)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def graph_of(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def package_of(module: str) -> str:
    """ccoverlap.analysis.reader -> analysis; ccoverlap -> ccoverlap (the top package's own body)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import of `graph` that points up a layer or sideways into another package of its layer, as
    'a -> b (layer i -> j)'; a package in no layer is one too (a new package takes its place in the table)."""
    layer = {package: n for n, row in enumerate(layers) for package in row}
    bad = sorted({f"{package_of(m)} is in no layer" for m in graph if package_of(m) not in layer})
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = package_of(module), package_of(target)
            if a != b and a in layer and b in layer and layer[b] >= layer[a]:
                bad.append(f"{module} -> {target} (layer {layer[a]} {a} -> layer {layer[b]} {b})")
    return bad


def test_no_import_points_up_a_layer():
    graph = graph_of(PACKAGE)
    assert {package_of(m) for m in graph} == {p for row in LAYERS for p in row}  # every layer names a package
    assert upward(graph, LAYERS) == []


def test_an_import_up_a_layer_or_across_one_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        "pkg/low/a.py": "def f():\n    from pkg.high import b\n    return b\n",  # lazy, still up
        "pkg/high/__init__.py": "",
        "pkg/high/b.py": "from pkg.low import a\n",
        "pkg/side/__init__.py": "",
        "pkg/side/c.py": "from pkg.high.b import a\n",
        "pkg/new/__init__.py": "",
    })
    assert upward(graph_of(pkg), (("pkg",), ("low",), ("high", "side"))) == [
        "new is in no layer",
        "pkg.low.a -> pkg.high.b (layer 1 low -> layer 2 high)",
        "pkg.side.c -> pkg.high.b (layer 2 side -> layer 2 high)",
    ]


def test_no_import_cycle_among_ccoverlap_modules():
    graph = graph_of(PACKAGE)
    assert "ccoverlap.bench.emulate" in graph and "ccoverlap.lab.kernels" in graph["ccoverlap.bench.proxy"]
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root / "pkg"


def test_a_cycle_through_a_name_of_the_parent_package_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import f\nVERSION = 1\n",
        "pkg/a.py": "from pkg import VERSION\nf = VERSION\n",  # needs pkg's body, which needs a
    })
    assert cycle(graph_of(pkg)) == ["pkg", "pkg.a", "pkg"]


def test_a_cycle_through_a_lazy_or_relative_import_is_found(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import f\n",  # a parent importing its child is no cycle
        "pkg/a.py": "from pkg import b\ndef f():\n    return b\n",
        "pkg/b.py": "import os\ndef g():\n    from .sub import c\n    return c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "def h():\n    from ..a import f\n    return f\n",
    })
    assert cycle(graph_of(pkg)) == ["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]


def test_an_acyclic_package_passes(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "from pkg.a import f\n",
        "pkg/a.py": "from pkg import b\nf = b.g\n",
        "pkg/b.py": "import json\ndef g():\n    from pkg.sub import c\n    return c\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/c.py": "import pkg.sub\nimport numpy.linalg\n",
    })
    graph = graph_of(pkg)
    assert graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == set()
    assert cycle(graph) is None


def test_the_c_core_names_no_front_end():
    """csrc/interposer.c is the core the CUDA and HIP front ends call; they register their hook tables with it
    (CCOV_FRONTEND), so the core refers to none of their names: C has no cycle either."""
    csrc = Path(__file__).parents[1] / "src" / "ccoverlap" / "csrc"
    core = (csrc / "interposer.c").read_text() + (csrc / "interposer.h").read_text()
    fronts = {name for f in ("interposer_cuda.c", "interposer_hip.c")
              for name in re.findall(r"^(?:static )?(?:const )?\w[\w *]*?\b(ccov_\w+)\s*[\[(=]", (csrc / f).read_text(),
                                     re.M)}
    assert {"ccov_cuda_hooks", "ccov_hip_hooks", "ccov_cuda_proc"} <= fronts
    assert not {name for name in fronts if re.search(rf"\b{name}\b", core)}
