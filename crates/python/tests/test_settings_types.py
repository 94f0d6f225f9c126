"""The typed settings (neardup.SketchSettings, DeduperSettings, Settings, DedupSettings) say
exactly what each entry point accepts, and a type checker flags a misspelt setting or value."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Dict, List, Set

import pyarrow as pa
import pytest

import neardup
import neardup.frames
import neardup.ray
from neardup import DeduperSettings, DedupSettings, Settings, SketchSettings


def accepted(call: Callable[..., Any]) -> Set[str]:
    """The setting names an entry point accepts, as its refusal of an unknown one lists them."""
    with pytest.raises(TypeError, match="unknown setting") as refused:
        call()
    return set(str(refused.value).split("valid settings: ", 1)[1].split(", "))


TABLE = pa.table({"text": ["a b c d e f g"]})

#: Each entry point, the class its settings are typed by, and a call of it with an unknown setting.
ENTRY_POINTS: List[tuple] = [
    (neardup.Sketcher, SketchSettings, lambda: neardup.Sketcher(no_such_setting=1)),
    (neardup.Deduper, DeduperSettings, lambda: neardup.Deduper(no_such_setting=1)),
    (neardup.Index, DeduperSettings, lambda: neardup.Index(no_such_setting=1)),
    (neardup.stream, Settings, lambda: neardup.stream([], no_such_setting=1)),
    (neardup.compute_keys, Settings, lambda: neardup.compute_keys([], no_such_setting=1)),
    (neardup.keys, Settings, lambda: neardup.keys([], 0, "unused.keys", no_such_setting=1)),
    (neardup.sign, Settings, lambda: neardup.sign("unused", "unused", no_such_setting=1)),
    (neardup.decide, Settings, lambda: neardup.decide([], "unused", 0, no_such_setting=1)),
    (neardup.dedup_table, Settings, lambda: neardup.dedup_table(TABLE, no_such_setting=1)),
    (neardup.drop_duplicates, Settings, lambda: neardup.drop_duplicates(TABLE, no_such_setting=1)),
    (neardup.dedup, DedupSettings, lambda: neardup.dedup([], "unused", no_such_setting=1)),
    (neardup.write, DedupSettings, lambda: neardup.write("unused", "unused", [], no_such_setting=1)),
]


@pytest.mark.parametrize("entry, typed, call", ENTRY_POINTS,
                         ids=[e[0].__name__ for e in ENTRY_POINTS])
def test_each_class_names_exactly_what_its_entry_points_accept(entry, typed, call):
    assert set(typed.__annotations__) == accepted(call)
    assert typed.__required_keys__ == frozenset()


def settings_annotation(f: Callable[..., Any]) -> str:
    return str(inspect.signature(f).parameters["settings"].annotation)


def test_every_entry_point_is_annotated_with_its_class():
    for entry, typed, _ in ENTRY_POINTS:
        if entry in (neardup.Sketcher, neardup.Deduper, neardup.Index):
            continue  # native classes: their signatures are in _native.pyi, checked below
        assert settings_annotation(entry) == f"Unpack[{typed.__name__}]", entry.__name__
    assert settings_annotation(neardup.ray.dedup) == "Unpack[DedupSettings]"
    assert settings_annotation(neardup.ray.drop_duplicates) == "Unpack[Settings]"
    hojichar = pytest.importorskip("neardup.hojichar")
    assert settings_annotation(hojichar.NearDedup.__init__) == "Unpack[DeduperSettings]"
    stubs = (Path(neardup.__file__).parent / "_native.pyi").read_text()
    for name, typed in [("Sketcher", "SketchSettings"), ("Deduper", "DeduperSettings"),
                        ("Index", "DeduperSettings")]:
        body = stubs.split(f"class {name}:", 1)[1].split("\nclass ", 1)[0]
        new = body.split("def __new__(", 1)[1].split(") ->", 1)[0]
        assert f"**settings: Unpack[{typed}]" in new, name


def literal_values(annotation: Any) -> Set[str]:
    """The strings of the Literal in an annotation (through Optional and Union)."""
    if typing.get_origin(annotation) is typing.Literal:
        return set(typing.get_args(annotation))
    return set().union(*(literal_values(a) for a in typing.get_args(annotation)))


def variants_named_by_refusal(name: str) -> Set[str]:
    """The values the library takes for `name`, as its refusal of a wrong one lists them."""
    with pytest.raises(ValueError) as refused:
        neardup.stream([], **{name: "no-such-value"})
    message = str(refused.value)
    assert f"setting {name}" in message
    return set(re.findall(r"`([^`]+)`", message.split("expected", 1)[1]))


def test_every_literal_is_the_library_s_own_list_of_values():
    hints: Dict[str, Any] = typing.get_type_hints(DedupSettings)
    closed = {n: a for n, a in hints.items()
              if literal_values(a) and str not in typing.get_args(a) and n != "compat"}
    assert {"format", "fields_mode", "hash", "band_keys", "short_texts", "verify", "empty",
            "on_error"} == set(closed)
    for name, annotation in closed.items():
        assert literal_values(annotation) == variants_named_by_refusal(name), name


def test_open_settings_take_every_named_value():
    hints = typing.get_type_hints(DedupSettings)
    for value in literal_values(hints["tokenize"]):
        assert neardup.Sketcher(tokenize=value).settings["tokenize"] in (value, "ascii-word")
    with pytest.raises(ValueError, match="unknown tokenize"):
        neardup.Sketcher(tokenize="no-such-tokenizer")
    for value in literal_values(hints["prefer"]):
        assert neardup.dedup_table(TABLE, prefer=value).num_rows == 1
    assert literal_values(hints["compat"]) == {"lshcurator"}
    with pytest.raises(ValueError, match="lshcurator"):
        neardup.Sketcher(compat="no-such-preset")


USER_CODE = '''
import neardup

neardup.dedup("in/", "out/", threshold=0.9, verify="exact", memory_limit=1 << 30)
neardup.dedup("in/", "out/", treshold=0.9)
neardup.dedup("in/", "out/", verify="exactly")
neardup.Deduper(threshold="high")
neardup.stream("in/", overwrite=True)
neardup.Index(num_perm=256, shingle=3)
'''


def test_a_type_checker_flags_a_misspelt_setting_and_a_wrong_value(tmp_path):
    pytest.importorskip("mypy")
    user = tmp_path / "user.py"
    user.write_text(USER_CODE)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", str(tmp_path / "cache"),
         "--ignore-missing-imports", str(user)],
        capture_output=True, text=True,
    )
    flagged = {int(line.split(":")[1]) for line in checked.stdout.splitlines()
               if line.startswith(str(user)) and ": error:" in line}
    lines = USER_CODE.splitlines()
    assert flagged == {lines.index(l) + 1 for l in lines
                       if "treshold" in l or "exactly" in l or '"high"' in l or "overwrite" in l}, \
        checked.stdout


def test_the_package_type_checks():
    pytest.importorskip("mypy")
    package = Path(__file__).resolve().parents[1] / "python" / "neardup"
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports",
         "--cache-dir", "/dev/null", str(package)],
        capture_output=True, text=True,
    )
    assert checked.returncode == 0, checked.stdout
