"""tools/sizes.py: each limit trips one past it and not at it; the ratchet of allowed places."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import sizes


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "src" / "jobq"
    for name, text in {"__init__.py": "", **files}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def function(name: str, lines: int, indent: str = "") -> str:
    return f"{indent}def {name}() -> None:\n" + f"{indent}    pass\n" * (lines - 1)


def kinds(root: Path) -> list[tuple[str, str, int]]:
    """(kind, qualified name or module list, value) of each finding under ``root``."""
    return [(f.kind, f.key.split(":")[-1], f.value)
            for f in sizes.findings([root], base=root.parent.parent)]


def test_a_function_of_51_lines_trips_and_one_of_50_does_not(tmp_path: Path) -> None:
    nested = "def outer() -> None:\n" + function("inner", 51, "    ")
    root = tree(tmp_path, {"m.py": function("ok", 50) + function("long", 51)
                           + "@staticmethod\n" + function("decorated", 50)
                           + "async " + function("waits", 51) + nested})
    assert kinds(root) == [("function", "long", 51), ("function", "decorated", 51),
                           ("function", "waits", 51), ("function", "outer", 52),
                           ("function", "outer.inner", 51)]


def test_a_module_of_301_lines_trips_and_one_of_300_does_not(tmp_path: Path) -> None:
    assert kinds(tree(tmp_path, {"m.py": "x = 1\n" * 300})) == []
    assert kinds(tree(tmp_path, {"m.py": "x = 1\n" * 301})) == [("module", "src/jobq/m.py", 301)]


def test_a_class_of_251_lines_trips_and_one_of_250_does_not(tmp_path: Path) -> None:
    def cls(name: str, lines: int) -> str:  # the decorator line counts
        return f"@final\nclass {name}:\n" + "    x = 1\n" * (lines - 2)

    root = tree(tmp_path, {"c.py": cls("Ok", 250), "d.py": cls("Long", 251)})
    assert kinds(root) == [("class", "Long", 251)]  # modules of 250 and 251 lines: ok


def attributes_class(name: str, count: int, base: str = "") -> str:
    """A class binding ``count`` instance attributes in every way the check counts."""
    lines = ["        self.a: int = 0", "        self.b += 1", "        self.c, [self.d, *self.e] = f()",
             "        for self.g in []: pass", "        with f() as self.h: pass"]
    lines += [f"        self.z{i} = 0" for i in range(count - 8)]  # f0 and a to h: 8
    return (f"class {name}{base}:\n    f0: int\n    k: ClassVar[int] = 0\n"
            "    def __init__(self) -> None:\n" + "\n".join(lines) + "\n"
            "        self.a.nested = 1\n        self.c[0] = 1\n        other.x = 1\n"  # bind no self.X
            "    def more(this) -> None:\n        this.z0 = 1\n"  # the same one again
            "    @classmethod\n    def make(cls) -> None:\n        cls.q = 1\n")  # a class attribute


def test_instance_attributes_count_at_16_not_15(tmp_path: Path) -> None:
    root = tree(tmp_path, {"c.py": "from typing import ClassVar\n"
                           + attributes_class("Fifteen", 15) + attributes_class("Sixteen", 16)})
    assert kinds(root) == [("attributes", "Sixteen", 16)]


def test_dataclass_fields_are_instance_attributes(tmp_path: Path) -> None:
    fields = "".join(f"    f{i}: int = 0\n" for i in range(15))
    root = tree(tmp_path, {"d.py": "from dataclasses import dataclass\n@dataclass\n"
                           f"class Fifteen:\n{fields}@dataclass(frozen=True)\nclass Sixteen:\n"
                           f"{fields}    def __post_init__(self) -> None:\n        self.extra = 1\n"})
    assert kinds(root) == [("attributes", "Sixteen", 16)]


def test_a_protocol_of_8_members_trips_and_one_of_7_does_not(tmp_path: Path) -> None:
    def protocol(name: str, base: str, members: int) -> str:
        body = ['    """A docstring is no member."""', "    attribute: int",
                "    @property\n    def prop(self) -> int: ...",
                "    @prop.setter\n    def prop(self, v: int) -> None: ..."]  # the same member
        body += [f"    def m{i}(self) -> None: ..." for i in range(members - 2)]
        return f"class {name}({base}):\n" + "\n".join(body) + "\n"

    root = tree(tmp_path, {"p.py": "import typing\nfrom typing import Protocol, TypeVar\nT = TypeVar('T')\n"
                           + protocol("Seven", "Protocol", 7) + protocol("Eight", "Protocol", 8)
                           + protocol("Dotted", "typing.Protocol", 8) + protocol("Generic", "Protocol[T]", 8)
                           + protocol("NoProtocol", "object", 9)})
    assert kinds(root) == [("protocol", "Eight", 8), ("protocol", "Dotted", 8), ("protocol", "Generic", 8)]


def test_an_import_cycle_is_found_but_not_through_type_checking(tmp_path: Path) -> None:
    root = tree(tmp_path, {
        "a.py": "import os\nfrom jobq import b\n",  # the submodule jobq.b
        "b.py": "def f() -> None:\n    from .pkg.c import x\n",  # an import that runs later
        "pkg/__init__.py": "",
        "pkg/c.py": "try:\n    import jobq.a\nexcept ImportError:\n    pass\n",
        "d.py": "import typing\nif typing.TYPE_CHECKING:\n    from jobq import e\nelse:\n    import jobq.a\n",
        "e.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobq.d import y\n"
                "from jobq import Name\n",  # not a module: the package jobq
        "f.py": "from . import sub\n", "sub/__init__.py": "from .. import f\n"})  # relative
    found = sizes.findings([root], base=tmp_path)
    assert [(f.kind, f.key, f.value, f.where) for f in found] == [
        ("cycle", "jobq.a,jobq.b,jobq.pkg.c", 3, "src/jobq/a.py:2"),
        ("cycle", "jobq.f,jobq.sub", 2, "src/jobq/f.py:1")]
    assert found[0].message() == ("src/jobq/a.py:2: cycle of 3 modules importing each other: "
                                  "jobq.a, jobq.b, jobq.pkg.c")


def test_messages_name_the_place_its_size_and_limit(tmp_path: Path) -> None:
    root = tree(tmp_path, {"m.py": "class C:\n" + function("long", 51, "    ")})
    assert [f.message() for f in sizes.findings([root], base=tmp_path)] == [
        "src/jobq/m.py:2: function C.long is 51 lines (limit 50)"]


FOUND = [sizes.Finding("function", "m.py:f", 60, "m.py:1")]


def test_the_ratchet_passes_the_same_or_smaller() -> None:
    assert sizes.check(FOUND, {("function", "m.py:f"): 60}) == []
    assert sizes.check(FOUND, {("function", "m.py:f"): 70}) == []
    assert sizes.shrunk(FOUND, {("function", "m.py:f"): 70}) == [
        "note: function m.py:f shrank from 70 to 60: lower its entry (--write-allowed)"]


def test_the_ratchet_fails_a_new_offender_one_that_grew_and_a_stale_entry() -> None:
    assert sizes.check(FOUND, {}) == ["m.py:1: function f is 60 lines (limit 50): a new offender"]
    assert sizes.check(FOUND, {("function", "m.py:f"): 55}) == [
        "m.py:1: function f is 60 lines (limit 50): grew from 55 (an entry may only shrink)"]
    stale = {("function", "m.py:f"): 60, ("cycle", "jobq.a,jobq.b"): 2}
    assert sizes.check([], {("function", "m.py:f"): 60}) == [
        "sizes_allowed.txt: function m.py:f 60 is within its limit now: delete its line"]
    assert sizes.check([], stale, lambda kind, key: kind != "cycle") == [  # checked elsewhere
        "sizes_allowed.txt: function m.py:f 60 is within its limit now: delete its line"]


def test_main_writes_the_list_then_holds_the_tree_to_it(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    root = tree(tmp_path, {"m.py": function("long", 52), "n.py": function("other", 51)})
    allowed = tmp_path / "allowed.txt"
    run = [str(root), "--allowed", str(allowed)]
    assert sizes.main([*run, "--write-allowed"]) == 0
    assert sizes.read_allowed(allowed) == {("function", f"{root}/m.py:long"): 52,
                                           ("function", f"{root}/n.py:other"): 51}
    assert sizes.main(run) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"sizes: ok, 2 allowed offenders left ({allowed})"

    (root / "m.py").write_text(function("long", 51))  # shrunk: passes
    assert sizes.main(run) == 0
    (root / "m.py").write_text(function("long", 53))  # grew: fails
    assert sizes.main(run) == 1
    (root / "m.py").write_text(function("long", 50) + function("new", 51))  # stale and new
    capsys.readouterr()
    assert sizes.main(run) == 1
    out = capsys.readouterr().out.splitlines()
    assert [line.rsplit(": ", 1)[-1] for line in out] == [
        "a new offender", "delete its line", f"2 failures, 1 allowed offenders left ({allowed})"]

    (root / "n.py").write_text("")  # checking m.py alone: n.py's stale entry is not its business
    assert sizes.main([str(root / "m.py"), "--allowed", str(allowed), "--write-allowed"]) == 0
    assert sizes.read_allowed(allowed) == {("function", f"{root}/n.py:other"): 51,
                                           ("function", f"{root}/m.py:new"): 51}


def test_a_malformed_allowed_list_fails(tmp_path: Path) -> None:
    allowed = tmp_path / "allowed.txt"
    allowed.write_text("# fine\nfunction m.py:f sixty\n")
    assert sizes.main([str(tree(tmp_path, {})), "--allowed", str(allowed)]) == 1


def test_the_tree_passes_its_own_check() -> None:
    assert sizes.main([]) == 0
