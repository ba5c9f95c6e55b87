"""Size limits of src/jobq, checked in `make lint`: small parts with one job each.

Limits: a module <= 300 lines, a class <= 250 lines and <= 15 instance attributes, a function
<= 50 lines, a Protocol <= 7 members, and no import cycle inside the package (imports under
``if TYPE_CHECKING:`` do not run, so they do not count; an import inside a function does).

The places that broke a limit when the check came in are listed in tools/sizes_allowed.txt
with their size then. That list only shrinks: a new offender fails, an allowed one that grew
fails, and an entry that no longer breaks its limit fails as stale until it is deleted.

    python -m tools.sizes                  # check src/jobq
    python -m tools.sizes src/jobq/worker  # check some files or folders only
    python -m tools.sizes --write-allowed  # rewrite the list from the tree (only to shrink it)
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "jobq"
ALLOWED = Path(__file__).with_name("sizes_allowed.txt")
LIMITS = {"module": 300, "class": 250, "attributes": 15, "function": 50, "protocol": 7}
UNITS = {"attributes": "instance attributes", "protocol": "members"}
KINDS = {*LIMITS, "cycle"}

Named = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Finding:
    """One place over its limit: ``key`` names it stably, ``value`` is its size.

    The key is ``path`` for a module, ``path:Qualified.name`` for a class or a function, and
    the sorted modules joined by commas for an import cycle (``value``: how many modules).
    """

    kind: str  # a LIMITS key, or "cycle"
    key: str
    value: int
    where: str  # path:line, for the message

    def message(self) -> str:
        if self.kind == "cycle":
            modules = self.key.replace(",", ", ")
            return f"{self.where}: cycle of {self.value} modules importing each other: {modules}"
        name = self.key.split(":", 1)[-1]
        unit = UNITS.get(self.kind, "lines")
        verb = "is" if unit == "lines" else "has"
        return f"{self.where}: {self.kind} {name} {verb} {self.value} {unit} (limit {LIMITS[self.kind]})"

    def entry(self) -> str:
        """Its line in the allowed list."""
        return f"{self.kind} {self.key} {self.value}"


# -- the tree --------------------------------------------------------------------------------


def _blocks(node: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists inside a compound statement other than a class or a function."""
    if isinstance(node, ast.If | ast.For | ast.AsyncFor | ast.While):
        return [node.body, node.orelse]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [node.body]
    if isinstance(node, ast.Try | ast.TryStar):
        return [node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody]
    if isinstance(node, ast.Match):
        return [case.body for case in node.cases]
    return []


def _walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Named]]:
    """(qualified name, node) of every class and function, nested ones included."""
    for node in body:
        if isinstance(node, Named):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _walk(node.body, f"{name}.")
        else:
            for block in _blocks(node):
                yield from _walk(block, prefix)


def _lines(node: Named) -> int:
    """Its lines, decorators included."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def _name(node: ast.expr) -> str:
    """``X`` of ``X``, ``mod.X``, ``X[...]`` and ``X(...)``."""
    if isinstance(node, ast.Subscript | ast.Call):
        return _name(node.value if isinstance(node, ast.Subscript) else node.func)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_protocol(node: ast.ClassDef) -> bool:
    return any(_name(base) == "Protocol" for base in node.bases)


def _protocol_members(node: ast.ClassDef) -> int:
    """Distinct names of the methods, properties and annotated attributes in its body (a
    property's setter or an ``@overload`` is no member more)."""
    names = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            names.add(item.target.id)
    return len(names)


def _self_names(target: ast.expr, receiver: str) -> Iterator[str]:
    """``X`` of each ``receiver.X`` that ``target`` binds (``self.a.b = `` binds no ``a``)."""
    if isinstance(target, ast.Attribute):
        if isinstance(target.value, ast.Name) and target.value.id == receiver:
            yield target.attr
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _self_names(element, receiver)
    elif isinstance(target, ast.Starred):
        yield from _self_names(target.value, receiver)


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign | ast.AugAssign | ast.For | ast.AsyncFor):
        return [node.target]
    if isinstance(node, ast.With | ast.AsyncWith):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _method_statements(method: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.AST]:
    """Every node of a method, its inner functions too, but not a class defined in it."""
    todo: list[ast.AST] = list(method.body)
    while todo:
        node = todo.pop()
        yield node
        todo.extend(n for n in ast.iter_child_nodes(node) if not isinstance(n, ast.ClassDef))


def _receiver(method: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The name of a method's instance (``self``), or None for a static or class method."""
    if any(_name(d) in ("staticmethod", "classmethod") for d in method.decorator_list):
        return None
    arguments = [*method.args.posonlyargs, *method.args.args]
    return arguments[0].arg if arguments else None


def _attributes(node: ast.ClassDef) -> set[str]:
    """Distinct ``self.X`` bound in the class's own methods, and its annotated fields (a
    dataclass's; ``ClassVar`` and ``InitVar`` are no instance attributes)."""
    names = {item.target.id for item in node.body
             if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
             and _name(item.annotation) not in ("ClassVar", "InitVar")}
    for method in node.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        receiver = _receiver(method)
        if receiver is None:
            continue
        for sub in _method_statements(method):
            for target in _targets(sub):
                names.update(_self_names(target, receiver))
    return names


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), str(path))


def _physical_lines(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _class_findings(node: ast.ClassDef, key: str, where: str) -> Iterator[Finding]:
    if _lines(node) > LIMITS["class"]:
        yield Finding("class", key, _lines(node), where)
    attributes = len(_attributes(node))
    if attributes > LIMITS["attributes"]:
        yield Finding("attributes", key, attributes, where)
    if _is_protocol(node) and _protocol_members(node) > LIMITS["protocol"]:
        yield Finding("protocol", key, _protocol_members(node), where)


def module_findings(path: Path, rel: str, tree: ast.Module | None = None) -> list[Finding]:
    """Every limit the module at ``path`` (shown as ``rel``; ``tree`` if parsed already)
    breaks, an import cycle aside."""
    found = []
    count = _physical_lines(path)
    if count > LIMITS["module"]:
        found.append(Finding("module", rel, count, f"{rel}:1"))
    for name, node in _walk((tree or _parse(path)).body, ""):
        key, where = f"{rel}:{name}", f"{rel}:{node.lineno}"
        if isinstance(node, ast.ClassDef):
            found.extend(_class_findings(node, key, where))
        elif _lines(node) > LIMITS["function"]:
            found.append(Finding("function", key, _lines(node), where))
    return found


# -- import cycles ---------------------------------------------------------------------------


def module_name(path: Path) -> str:
    """``jobq.transports.memory`` of ``.../src/jobq/transports/memory.py``: the folders up to
    the last one holding an ``__init__.py``."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return isinstance(test, ast.Name | ast.Attribute) and _name(test) == "TYPE_CHECKING"


def _imported(node: ast.Import | ast.ImportFrom, package: str, known: set[str]) -> Iterator[str]:
    """The modules of ``known`` an import statement of a module in ``package`` loads."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in known)
        return
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        if submodule in known:
            yield submodule
        elif base in known:
            yield base


def _imports(tree: ast.Module, module: str, is_package: bool, known: set[str]) -> dict[str, int]:
    """The modules of ``known`` that ``module`` imports when it runs, at once or from a
    function (not under ``if TYPE_CHECKING:``), each with the line of its first import."""
    package = module if is_package else module.rpartition(".")[0]
    out: dict[str, int] = {}

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(node, package, known):
                    out.setdefault(target, node.lineno)
            elif isinstance(node, Named):
                visit(node.body)
            elif isinstance(node, ast.If) and _is_type_checking(node.test):
                visit(node.orelse)
            else:
                for block in _blocks(node):
                    visit(block)

    visit(tree.body)
    out.pop(module, None)
    return out


def _components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(component) > 1:
                out.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            strong(module)
    return sorted(out)


def cycle_findings(files: dict[str, Path], shown: Callable[[Path], str],
                   trees: dict[Path, ast.Module] | None = None) -> list[Finding]:
    """One finding per import cycle among ``files`` (module name -> path; ``trees`` the
    ones parsed already), shown at the first import from its first module into the cycle."""
    known = set(files)
    trees = trees or {}
    graph = {m: _imports(trees.get(p) or _parse(p), m, p.name == "__init__.py", known)
             for m, p in files.items()}
    found = []
    for component in _components(graph):
        first = component[0]
        line = min(n for target, n in graph[first].items() if target in component)
        found.append(Finding("cycle", ",".join(component), len(component),
                             f"{shown(files[first])}:{line}"))
    return found


# -- the check -------------------------------------------------------------------------------


def collect(paths: Sequence[Path]) -> list[Path]:
    """The Python files of ``paths`` (files, or folders searched recursively)."""
    out: set[Path] = set()
    for path in paths:
        out.update(path.rglob("*.py") if path.is_dir() else [path])
    return sorted(p.resolve() for p in out)


def _shown(path: Path, base: Path) -> str:
    path = path.resolve()
    return (path.relative_to(base) if path.is_relative_to(base) else path).as_posix()


def findings(paths: Sequence[Path] = (PACKAGE,), base: Path = ROOT) -> list[Finding]:
    """Every place in ``paths`` over a limit, paths shown relative to ``base``."""
    base = base.resolve()
    trees = {path: _parse(path) for path in collect(paths)}
    out = [f for path, tree in trees.items() for f in module_findings(path, _shown(path, base), tree)]
    modules = {module_name(path): path for path in trees}
    return out + cycle_findings(modules, lambda path: _shown(path, base), trees)


def read_allowed(path: Path) -> dict[tuple[str, str], int]:
    """(kind, key) -> the size it had; lines ``kind key value``, ``#`` comments."""
    allowed: dict[tuple[str, str], int] = {}
    lines = path.read_text().splitlines() if path.exists() else []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 3 or fields[0] not in KINDS or not fields[2].isdigit():
            raise ValueError(f"{path}:{number}: not `kind key value` (kinds: {sorted(KINDS)}): {line}")
        allowed[(fields[0], fields[1])] = int(fields[2])
    return allowed


def check(found: Sequence[Finding], allowed: dict[tuple[str, str], int],
          in_scope: Callable[[str, str], bool] = lambda kind, key: True,
          listed: str = ALLOWED.name) -> list[str]:
    """The failures: new offenders, allowed ones that grew, and stale entries (of those
    entries ``in_scope`` says were checked)."""
    failures = []
    for finding in found:
        was = allowed.get((finding.kind, finding.key))
        if was is None:
            failures.append(f"{finding.message()}: a new offender")
        elif finding.value > was:
            failures.append(f"{finding.message()}: grew from {was} (an entry may only shrink)")
    seen = {(f.kind, f.key) for f in found}
    failures += [f"{listed}: {kind} {key} {value} is within its limit now: delete its line"
                 for (kind, key), value in sorted(allowed.items())
                 if (kind, key) not in seen and in_scope(kind, key)]
    return failures


def shrunk(found: Sequence[Finding], allowed: dict[tuple[str, str], int]) -> list[str]:
    """Notes for the allowed offenders now smaller than their entry (not failures)."""
    return [f"note: {f.kind} {f.key} shrank from {allowed[(f.kind, f.key)]} to {f.value}: "
            f"lower its entry (--write-allowed)"
            for f in found if f.value < allowed.get((f.kind, f.key), f.value)]


def scope(paths: Sequence[Path], base: Path) -> Callable[[str, str], bool]:
    """Whether an entry of the allowed list is about a place under ``paths``: its file, or
    for a cycle one of its modules."""
    roots = [_shown(p, base.resolve()) for p in paths]
    modules = {module_name(p) for p in collect(paths)}

    def covers(kind: str, key: str) -> bool:
        if kind == "cycle":
            return any(m in modules for m in key.split(","))
        file = key.split(":", 1)[0]
        return any(file == root or file.startswith(root.rstrip("/") + "/") for root in roots)

    return covers


HEADER = """\
# Places over a size limit of tools/sizes.py (`make lint`) when the check came in, with their
# size then: `kind key size`, the key a path, path:Qualified.name, or a cycle's sorted modules.
# A ratchet: an entry may only shrink or go. A new offender fails, an allowed one that grew
# beyond its size here fails, and an entry now within its limit fails as stale until its line
# is deleted, so the list stays true. `python -m tools.sizes --write-allowed` rewrites it.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="files or folders (default: src/jobq)")
    parser.add_argument("--allowed", type=Path, default=ALLOWED, help="the allowed list")
    parser.add_argument("--write-allowed", action="store_true",
                        help="write the allowed list from the tree as it is")
    args = parser.parse_args(argv)
    paths: list[Path] = args.paths or [PACKAGE]
    shown = _shown(args.allowed, ROOT)
    try:
        allowed = read_allowed(args.allowed)
    except ValueError as error:
        print(error)
        return 1
    found = findings(paths)
    in_scope = scope(paths, ROOT)
    if args.write_allowed:
        kept = [f"{kind} {key} {value}\n" for (kind, key), value in allowed.items()
                if not in_scope(kind, key)]
        args.allowed.write_text(HEADER + "".join(kept) + "".join(f"{f.entry()}\n" for f in found))
        print(f"sizes: wrote {len(kept) + len(found)} entries to {shown}")
        return 0
    failures = check(found, allowed, in_scope, args.allowed.name)
    for line in [*shrunk(found, allowed), *failures]:
        print(line)
    left = len(found) - sum(1 for f in failures if f.endswith("a new offender"))
    if failures:
        print(f"sizes: {len(failures)} failures, {left} allowed offenders left ({shown})")
        return 1
    print(f"sizes: ok, {left} allowed offenders left ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
