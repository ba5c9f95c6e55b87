"""tools/sizes.py: each limit trips one past it and not at it; the ratchet of allowed places."""

from __future__ import annotations

from pathlib import Path

from tools import sizes


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "src" / "jobq"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def function(name: str, lines: int) -> str:
    return f"def {name}() -> None:\n" + "    pass\n" * (lines - 1)


def kinds(root: Path) -> list[tuple[str, str, int]]:
    return [(f.kind, f.key.split(":")[-1], f.value) for f in sizes.findings(root)]


def test_a_function_of_51_lines_trips_and_one_of_50_does_not(tmp_path: Path) -> None:
    root = tree(tmp_path, {"m.py": function("ok", 50) + function("long", 51)})
    assert kinds(root) == [("function", "long", 51)]


def test_a_module_of_301_lines_trips(tmp_path: Path) -> None:
    assert kinds(tree(tmp_path, {"m.py": "x = 1\n" * 300})) == []
    assert kinds(tree(tmp_path, {"m.py": "x = 1\n" * 301})) == [("module", "src/jobq/m.py", 301)]


def test_instance_attributes_and_protocol_members_are_counted(tmp_path: Path) -> None:
    assigns = "".join(f"        self.a{i} = 0\n" for i in range(15))
    members = "".join(f"    def m{i}(self) -> None: ...\n" for i in range(8))
    root = tree(tmp_path, {
        "c.py": f"class Fifteen:\n    def __init__(self) -> None:\n{assigns}\n"
                f"class Sixteen:\n    b: int\n    def __init__(self) -> None:\n{assigns}"
                "        self.a0, self.c = 1, 2\n",
        "p.py": f"from typing import Protocol\nclass Port(Protocol):\n{members}"})
    assert sorted(kinds(root)) == [("attributes", "Sixteen", 17), ("protocol", "Port", 8)]


def test_an_import_cycle_is_found_but_not_through_type_checking(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "a.py": "from jobq import b\n",
        "b.py": "def f() -> None:\n    from jobq.a import x\n",  # an import that runs later
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobq import a\n",
        "d.py": "from jobq import c\n"})
    assert kinds(root) == [("cycle", "jobq.a -> jobq.b", 2)]


def test_the_allowed_list_only_shrinks(tmp_path: Path) -> None:
    found = [sizes.Finding("function", "m.py:f", 60, "m.py:1")]
    assert sizes.check(found, {("function", "m.py:f"): 60}) == []
    assert sizes.check(found, {("function", "m.py:f"): 70}) == []  # shrunk: fine
    assert "grew from 55" in sizes.check(found, {("function", "m.py:f"): 55})[0]
    assert "has 60 lines (limit 50)" in sizes.check(found, {})[0]  # a new offender
    stale = sizes.check([], {("function", "m.py:f"): 60})
    assert stale and "delete its line" in stale[0]


def test_the_tree_passes_its_own_check() -> None:
    assert sizes.main([]) == 0
