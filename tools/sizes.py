"""Size limits of src/jobq, checked in `make lint`: small parts with one job each.

Limits: a module <= 300 lines, a class <= 250 lines and <= 15 instance attributes, a function
<= 50 lines, a Protocol <= 7 members, and no import cycle inside the package (imports under
``if TYPE_CHECKING:`` do not run, so they do not count).

The places that broke a limit when the check came in are listed in tools/sizes_allowed.txt
with their size then. That list only shrinks: a new offender fails, an allowed one that grew
fails, and an entry that no longer breaks its limit fails as stale until it is deleted.

    python -m tools.sizes                  # check src/jobq
    python -m tools.sizes --write-allowed  # rewrite the list from the tree (only to shrink it)
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "jobq"
ALLOWED = Path(__file__).with_name("sizes_allowed.txt")
LIMITS = {"module": 300, "class": 250, "attributes": 15, "function": 50, "protocol": 7}


@dataclass(frozen=True)
class Finding:
    """One place over its limit: ``key`` names it stably, ``value`` is its size."""

    kind: str  # a LIMITS key, or "cycle"
    key: str
    value: int
    where: str  # path:line, for the message

    def message(self) -> str:
        if self.kind == "cycle":
            return f"{self.where}: import cycle {self.key}"
        unit = {"attributes": "instance attributes", "protocol": "members"}.get(self.kind, "lines")
        return f"{self.where}: {self.kind} {self.key} has {self.value} {unit} (limit {LIMITS[self.kind]})"


def _lines(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def _is_protocol(node: ast.ClassDef) -> bool:
    for base in node.bases:
        target = base.value if isinstance(base, ast.Subscript) else base
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "Protocol":
            return True
    return False


def _protocol_members(node: ast.ClassDef) -> int:
    return sum(1 for item in node.body
               if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.AnnAssign))


def _attributes(node: ast.ClassDef) -> set[str]:
    """Distinct ``self.X`` assigned in the class's own methods, and its annotated fields."""
    names = {item.target.id for item in node.body
             if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)}
    for method in node.body:
        if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for sub in ast.walk(method):
            targets: list[ast.expr] = []
            if isinstance(sub, ast.Assign):
                targets = list(sub.targets)
            elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
                targets = [sub.target]
            for target in targets:
                for leaf in ast.walk(target):
                    if (isinstance(leaf, ast.Attribute) and isinstance(leaf.value, ast.Name)
                            and leaf.value.id == "self"):
                        names.add(leaf.attr)
    return names


Named = ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef


def _walk(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, Named]]:
    """(qualified name, node) of every class and function, nested ones included."""
    for node in body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, node
            yield from _walk(node.body, f"{name}.")
        elif isinstance(node, ast.If | ast.Try | ast.With):
            yield from _walk(node.body, prefix)


def module_findings(path: Path, rel: str) -> list[Finding]:
    """Every limit ``path`` breaks."""
    text = path.read_text()
    found = []
    count = len(text.splitlines())
    if count > LIMITS["module"]:
        found.append(Finding("module", rel, count, f"{rel}:1"))
    for name, node in _walk(ast.parse(text, rel).body, ""):
        key, where = f"{rel}:{name}", f"{rel}:{node.lineno}"
        if isinstance(node, ast.ClassDef):
            if _lines(node) > LIMITS["class"]:
                found.append(Finding("class", key, _lines(node), where))
            attributes = len(_attributes(node))
            if attributes > LIMITS["attributes"]:
                found.append(Finding("attributes", key, attributes, where))
            if _is_protocol(node) and _protocol_members(node) > LIMITS["protocol"]:
                found.append(Finding("protocol", key, _protocol_members(node), where))
        elif _lines(node) > LIMITS["function"]:
            found.append(Finding("function", key, _lines(node), where))
    return found


def _runtime_imports(tree: ast.Module, module: str, known: set[str]) -> set[str]:
    """The jobq modules ``module`` imports when it runs, at once or from a function (not
    under ``if TYPE_CHECKING:``)."""
    package = module if module.endswith("__init__") else module.rsplit(".", 1)[0]
    package = package.removesuffix(".__init__")
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                test = node.test
                guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
                    isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
                if not guarded:
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names if a.name in known)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    out.add(sub if sub in known else base)
            elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef | ast.Try
                            | ast.With | ast.AsyncWith | ast.For | ast.While):
                visit(node.body)  # an import in a function runs too, later: it still counts
    visit(tree.body)
    return {m for m in out if m in known and m != module}


def cycle_findings(root: Path) -> list[Finding]:
    """One finding per strongly connected component of more than one module."""
    files = {".".join(("jobq", *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    known = set(files)
    graph = {m: _runtime_imports(ast.parse(p.read_text()), m if p.name != "__init__.py"
                                 else f"{m}.__init__", known) for m, p in files.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[Finding] = []

    def strong(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
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
                key = " -> ".join(sorted(component))
                found.append(Finding("cycle", key, len(component), "src/jobq"))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for module in sorted(graph):
        if module not in index:
            strong(module)
    return found


def findings(root: Path = PACKAGE) -> list[Finding]:
    """Every place under ``root`` over a limit."""
    base = root.parent.parent
    out = [f for path in sorted(root.rglob("*.py"))
           for f in module_findings(path, str(path.relative_to(base)))]
    return out + cycle_findings(root)


def read_allowed(path: Path) -> dict[tuple[str, str], int]:
    """(kind, key) -> the size it had; lines ``kind<TAB>key<TAB>value``, # comments."""
    allowed = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.strip() and not line.startswith("#"):
            kind, key, value = line.split("\t")
            allowed[(kind, key)] = int(value)
    return allowed


def check(found: list[Finding], allowed: dict[tuple[str, str], int]) -> list[str]:
    """The failures: new offenders, allowed ones that grew, and stale entries."""
    failures = []
    seen = set()
    for finding in found:
        ident = (finding.kind, finding.key)
        seen.add(ident)
        if ident not in allowed:
            failures.append(finding.message())
        elif finding.value > allowed[ident]:
            failures.append(f"{finding.message()}: grew from {allowed[ident]} (allowed only to shrink)")
    failures += [f"{ALLOWED.name}: {kind} {key} is within its limit now: delete its line"
                 for kind, key in sorted(set(allowed) - seen)]
    return failures


HEADER = """\
# Places over a size limit of tools/sizes.py when the check came in, with their size then.
# A ratchet: an entry may only shrink or go. A new offender fails `make lint`, one that grew
# fails, and one now within its limit fails until its line is deleted. kind<TAB>key<TAB>size
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write-allowed", action="store_true",
                        help=f"write {ALLOWED.name} from the tree as it is")
    args = parser.parse_args(argv)
    found = findings()
    if args.write_allowed:
        ALLOWED.write_text(HEADER + "".join(f"{f.kind}\t{f.key}\t{f.value}\n" for f in found))
        print(f"sizes: wrote {len(found)} entries to {ALLOWED.relative_to(ROOT)}")
        return 0
    failures = check(found, read_allowed(ALLOWED))
    for failure in failures:
        print(failure)
    if failures:
        print(f"sizes: {len(failures)} failures (limits: {LIMITS})")
        return 1
    print(f"sizes: ok, {len(found)} allowed offenders left ({ALLOWED.relative_to(ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
