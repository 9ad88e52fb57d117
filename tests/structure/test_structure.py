"""The package's floor map: each part of dpgen imports only parts on floors below it (so an upward import
or a circle fails here), nothing but the entry points imports the pipeline, no private name crosses a
module, the method interface does not import the loop that drives it, and the privacy package's face
exports every mechanism.  docs/ARCHITECTURE.md shows the same map (checked below)."""

from __future__ import annotations

import ast
import functools
import inspect
from pathlib import Path

import pytest

import dpgen.privacy as privacy
from dpgen.privacy.mechanisms import Mechanism

PKG = Path(privacy.__file__).resolve().parents[1]
ARCHITECTURE = PKG.parent / "docs" / "ARCHITECTURE.md"

# floor -> (the parts of dpgen on it, what they are); a part imports only parts on lower floors
FLOORS: list[tuple[set[str], str]] = [
    ({"errors", "interrupt", "paths", "utils"}, "user errors, stop signals, where files are, small torch helpers"),
    ({"ot"}, "optimal transport maths"),
    ({"privacy"}, "mechanisms, bounds, accountants, ledger, sampler"),
    ({"data", "models", "logging", "runs"}, "datasets, networks, run logger, run folders"),
    ({"config"}, "the one config composer, settings schemas and validation"),
    ({"methods"}, "one module per method on one training loop"),
    ({"eval", "export", "audit"}, "evaluation, releases and privacy cards, empirical audit"),
    ({"pipeline", "preflight"}, "the composition of one run, the command line's check before it"),
    ({"app", "api", "report", "bench", "reproduce"}, "train.py's Hydra app, the Python API, tools"),
    ({"cli", "preset_runs"}, "the `dpgen` command, what has been run of each preset"),
    ({"presets"}, "`dpgen presets`"),
]
# the privacy core and the maths stand on the ground floor only (no Hydra, no logging, no data layer)
CORE = {"ot": {"errors", "utils"}, "privacy": {"errors", "utils", "ot"}}
PIPELINE_USERS = {"app", "api", "cli", "bench"}  # bench: the GPU check times whole runs


def _floor(part: str) -> int:
    (i,) = [i for i, (parts, _) in enumerate(FLOORS) if part in parts]
    return i


def _parts() -> set[str]:
    """Every package and top-level module of dpgen (``dpgen/x.py`` or ``dpgen/x/``)."""
    return {p.stem for p in PKG.glob("*.py") if p.stem != "__init__" and p.stem != "__main__"} | \
        {p.name for p in PKG.iterdir() if (p / "__init__.py").is_file()}


def _part(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _dpgen_imports(path: Path) -> set[str]:
    """The first dpgen sub-package / module each import of ``path`` names (relative imports resolved)."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts[:-1]  # the file's package, e.g. (dpgen, privacy)
    out = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom):
            base = list(parts[: len(parts) - node.level + 1]) if node.level else []
            full = base + (node.module.split(".") if node.module else [])
            names = [full + [a.name] for a in node.names] if not node.module else [full]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
        else:
            continue
        out |= {n[1] for n in names if len(n) > 1 and n[0] == "dpgen"}
    return out


@functools.cache
def _imports() -> dict[str, set[str]]:
    """part -> the other parts of dpgen it imports (anywhere in its files, lazy imports included)."""
    out: dict[str, set[str]] = {}
    for path in PKG.rglob("*.py"):
        part = _part(path)
        if part in ("__init__", "__main__"):
            continue
        out.setdefault(part, set()).update(_dpgen_imports(path) - {part})
    return out


def test_every_part_of_the_package_has_a_floor():
    placed = set().union(*(parts for parts, _ in FLOORS))
    assert _parts() <= placed, f"give these a floor in FLOORS: {sorted(_parts() - placed)}"
    assert placed <= _parts() | {"app"}, f"FLOORS names parts that do not exist: {sorted(placed - _parts())}"


def test_each_part_imports_only_parts_on_lower_floors():
    bad = {part: sorted(d for d in deps if _floor(d) >= _floor(part)) for part, deps in _imports().items()}
    assert not {k: v for k, v in bad.items() if v}, "upward or same-floor imports (a circle starts so)"


def test_the_privacy_core_and_the_maths_import_only_the_ground_floor():
    imports = _imports()
    bad = {part: sorted(imports.get(part, set()) - allowed) for part, allowed in CORE.items()}
    assert not {k: v for k, v in bad.items() if v}


def test_only_the_entry_points_import_the_pipeline():
    users = {part for part, deps in _imports().items() if "pipeline" in deps}
    assert users <= PIPELINE_USERS, sorted(users - PIPELINE_USERS)


# the one distributed module (the process group and its collectives) and the torchrun launcher
DISTRIBUTED = {"utils/dist.py", "utils/launch.py"}


def test_only_the_distributed_module_speaks_torch_distributed():
    """Every rank check, collective and launch goes through ``dpgen.utils.dist`` (``launch`` for torchrun):
    one "is it active?" check, one way to ask for the rank."""
    users = set()
    for path in PKG.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
            if any(n.startswith("torch.distributed") for n in names):
                users.add(path.relative_to(PKG).as_posix())
    assert users == DISTRIBUTED, sorted(users ^ DISTRIBUTED)


def test_no_private_name_crosses_a_module():
    crossing = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                crossing += [f"{path.relative_to(PKG)}: {a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert not crossing


# attributes of other libraries that start with one underscore and are read on purpose, each with its reason
FOREIGN_PRIVATE = {
    "_exit": "os._exit: the standard library's documented exit without interpreter teardown",
    "_BatchNorm": "torch.nn.modules.batchnorm._BatchNorm: torch's one base class of every BatchNorm layer",
    "_get_node": "OmegaConf's node API: a child node without resolving interpolations (presets, preflight)",
    "_is_none": "OmegaConf's node API: a None node without resolving it (presets)",
    "_value": "OmegaConf's node API: a leaf's raw value, interpolations unresolved (presets)",
}


def _own_attributes(tree: ast.Module) -> set[str]:
    """Names a module gives its own classes: methods and class attributes, and ``self.x`` / ``cls.x``."""
    own = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node in cls.body:
                own.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and any(
                    node in ast.walk(stmt) for stmt in cls.body if isinstance(stmt, ast.Assign | ast.AnnAssign)):
                own.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)
    return own


def private_attribute_reads(tree: ast.Module) -> list[str]:
    """``obj._name`` (one leading underscore; Hydra's ``_target_`` style keys excepted) read or written on
    something other than ``self`` / ``cls``, where no class of this module defines ``_name``: another
    module's private attribute.  A subclass overriding a hook (``super()._config()``) defines it too."""
    own = _own_attributes(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or name.startswith("__") or name.endswith("_") or name in FOREIGN_PRIVATE:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls") or name in own:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_modules_private_attribute():
    """A private attribute (``_name``) belongs to its module; another module, or a script, asks through a
    public, documented method or property named for what it means."""
    files = sorted(PKG.rglob("*.py")) + sorted((PKG.parent / "scripts").glob("*.py"))
    crossing = [f"{path.relative_to(PKG.parent)}:{hit}" for path in files for hit in private_attribute_reads(_tree(path))]
    assert not crossing, "give these a public interface in the module that owns them:\n" + "\n".join(crossing)


def test_the_private_attribute_check_can_fail():
    tree = ast.parse("class A:\n    def _mine(self):\n        return self._x, A._mine, other._mine\n"
                     "def f(method, cfg):\n    return method._rowmap(1), cfg._target_, super()._config()\n")
    assert private_attribute_reads(tree) == ["5: method._rowmap", "5: super()._config"]


def test_one_module_finds_the_checkout():
    """dpgen.paths (ROOT, CONFIGS, DOCS) is where the package and the scripts find the checkout's files."""
    found = [f"{p.relative_to(PKG.parent)}:{i}" for folder in (PKG, PKG.parent / "scripts")
             for p in sorted(folder.rglob("*.py")) if p != PKG / "paths.py"
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if "__file__" in line and ("parents[" in line or "parent.parent" in line)]
    assert not found, "use dpgen.paths instead:\n" + "\n".join(found)


def test_the_architecture_page_shows_the_floor_map():
    assert floor_map() in ARCHITECTURE.read_text(), "docs/ARCHITECTURE.md: paste tests/structure/test_structure.py's floor_map()"


def floor_map() -> str:
    """The floor map as docs/ARCHITECTURE.md shows it (top floor first)."""
    rows = [f"| {i} | {', '.join(f'`{p}`' for p in sorted(parts))} | {what} |"
            for i, (parts, what) in reversed(list(enumerate(FLOORS)))]
    return "\n".join(["| floor | parts of dpgen | what |", "|---|---|---|", *rows])


def test_the_method_interface_does_not_import_the_loop():
    tree = ast.parse((PKG / "methods" / "base.py").read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "loop" not in modules and "dpgen.methods.loop" not in modules


def test_the_privacy_package_exports_every_mechanism():
    import dpgen.privacy.moments  # noqa: F401  (defines two mechanisms)

    kinds = {c for c in _subclasses(Mechanism) if not inspect.isabstract(c) and c.__module__.startswith("dpgen.")
             and "kind" in c.__dict__}  # a kind of its own (a benchmark's variant of a kind is not one)
    assert kinds and kinds <= {getattr(privacy, n) for n in privacy.__all__}


def _subclasses(cls: type) -> set[type]:
    return {s for c in cls.__subclasses__() for s in {c, *_subclasses(c)}}


def test_the_wheel_lists_every_package_and_ships_the_configs():
    """pyproject.toml lists the packages (a mapped folder is not discovered): every one of dpgen/, plus
    configs/ as dpgen.configs (Hydra's pkg:// search path of an installed wheel) and each of its group folders
    (setuptools warns, and will refuse, a folder of package data that is not a listed package)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    setup = tomllib.loads((PKG.parent / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {".".join(p.parent.relative_to(PKG.parent).parts) for p in PKG.rglob("__init__.py")}
    configs = PKG.parent / "configs"
    groups = {".".join(("dpgen.configs", *d.relative_to(configs).parts)) for d in configs.rglob("*")
              if d.is_dir() and any(d.glob("*.yaml"))}
    assert groups and set(setup["packages"]) == packages | {"dpgen.configs"} | groups
    assert setup["package-dir"] == {"dpgen.configs": "configs"} and (PKG.parent / "configs" / "__init__.py").is_file()


def _module_of(path: Path) -> str:
    """``dpgen/privacy/mechanisms.py`` -> ``dpgen.privacy.mechanisms`` (a package: its ``__init__``'s name)."""
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph() -> dict[str, set[str]]:
    """module -> the dpgen modules it imports (relative and absolute, lazy imports included); ``from pkg import
    name`` points at the submodule ``pkg.name`` when there is one, else at ``pkg``'s ``__init__``."""
    modules = {_module_of(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        out = set()
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + (node.module.split(".") if node.module else []))
                out |= {f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target for a in node.names}
            elif isinstance(node, ast.Import):
                out |= {a.name for a in node.names}
        graph[name] = {m for m in out if m in modules and m != name}
    return graph


def test_no_circle_between_the_modules_of_a_package():
    """Inside each part too (e.g. privacy/): no module imports, directly or through others, one that imports it."""
    graph = _module_graph()
    circles = set()
    for start in graph:
        stack, seen = [(start, (start,))], set()
        while stack:
            node, trail = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    circles.add(" -> ".join((*trail, start)))
                elif nxt not in seen and not nxt.startswith(start + "."):  # a package importing its own modules
                    seen.add(nxt)
                    stack.append((nxt, (*trail, nxt)))
    assert not circles, sorted(circles)[:10]


def _names_used(path: Path) -> set[str]:
    """Every name ``path`` imports or reads (``from hydra import x``, ``hydra.x``, ``x``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom | ast.Import):
            out.update(a.name.rsplit(".", 1)[-1] for a in node.names)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, ast.Name):
            out.add(node.id)
    return out


def test_one_config_composer():
    """``dpgen.config.compose`` is THE composition of train.yaml outside the Hydra app: the package, the tools and the
    tests go through it (a second composer drifts: another data root, a Hydra state not cleared)."""
    root = PKG.parent
    files = [*PKG.rglob("*.py"), *(root / "tests").rglob("*.py"), *(root / "scripts").rglob("*.py"), root / "train.py"]
    users = sorted(p.relative_to(root).as_posix() for p in files
                   if p.is_file() and {"initialize_config_dir", "initialize_config_module"} & _names_used(p))
    assert users == ["dpgen/config.py"], users
