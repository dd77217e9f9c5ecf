"""Parsing YAML, TOML and JSON with key positions, and every way a file can be unreadable."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from parplan.config.readers import MAX_ALIAS_VALUES, MAX_FILE_BYTES, read_file, read_text
from parplan.errors import ConfigError

YAML = """\
# comment
name: c
generator:
  kind: switch
  hosts: 4
links:
  - a: x
    b: y
  - {a: y, b: z}
"""

JSON = """{
  "name": "c",
  "generator": {"kind": "switch",
                "hosts": 4},
  "links": [
    {"a": "x", "b": "y"},
    {"a": "y", "b": "z"}
  ]
}
"""

TOML = """\
name = "c"

[generator]
kind = "switch"
hosts = 4

[[links]]
a = "x"
b = "y"

[[links]]
a = "y"
b = "z"
"""


def test_yaml_positions_are_exact() -> None:
    data, pos = read_text(YAML, "c.yaml")
    assert data["links"][1] == {"a": "y", "b": "z"}
    assert pos[("name",)] == (2, 1)
    assert pos[("generator", "hosts")] == (5, 3)
    assert pos[("links", 0)] == (7, 5)
    assert pos[("links", 0, "b")] == (8, 5)
    assert pos[("links", 1)] == (9, 5)
    assert pos[("links", 1, "b")] == (9, 12)


def test_json_positions_are_exact() -> None:
    data, pos = read_text(JSON, "c.json")
    assert data["generator"]["hosts"] == 4
    assert pos[("generator", "hosts")] == (4, 17)
    assert pos[("links", 1)] == (7, 5)
    assert pos[("links", 1, "b")] == (7, 16)


def test_toml_positions_follow_tables_and_arrays_of_tables() -> None:
    data, pos = read_text(TOML, "c.toml")
    assert data["links"][1]["b"] == "z"
    assert pos[("generator",)] == (3, 1)
    assert pos[("generator", "hosts")] == (5, 1)
    assert pos[("links", 0, "b")] == (9, 1)
    assert pos[("links", 1)] == (11, 1)
    assert pos[("links", 1, "b")] == (13, 1)


def test_toml_inline_tables_dotted_keys_and_multiline_arrays() -> None:
    text = (
        'name = "x"  # comment with "quotes" = here\n'
        "[[plans]]\n"
        'name = "a"\n'
        "[plans.strategy]\n"
        'kind = "data_parallel"\n'
        'aggregation = { algorithm = "tree:2", bucket_size = "1 MiB" }\n'
        "[[plans]]\n"
        'strategy.kind = "local"\n'
        "devices = [\n"
        '  "h0",  # first\n'
        '  "h1",\n'
        "]\n"
        "text = '''multi\n"
        "line = 3'''\n"
        "after = 1\n"
    )
    data, pos = read_text(text, "x.toml")
    assert data["plans"][1]["strategy"]["kind"] == "local"
    assert pos[("plans", 0, "strategy", "aggregation", "bucket_size")] == (6, 39)
    assert pos[("plans", 1, "strategy", "kind")] == (8, 1)
    assert pos[("plans", 1, "strategy")] == (8, 1)
    assert pos[("plans", 1, "devices", 1)] == (11, 3)
    assert pos[("plans", 1, "after")] == (15, 1)
    assert ("plans", 1, "line") not in pos  # inside the multi-line string


@pytest.mark.parametrize(
    ("name", "text", "message", "line"),
    [
        ("a.yaml", "a: [1\nb: 2\n", "invalid YAML:", 2),
        ("a.yaml", "a: 1\n  b: 2\n", "invalid YAML: mapping values are not allowed here", 2),
        ("a.yaml", "a: 1\na: 2\n", "duplicate key 'a' (first at line 1)", 2),
        ("a.yaml", "x: !!python/name:os.system\n", "unsupported YAML tag '!!python/name:os.system'", 1),
        ("a.yaml", "x: !custom 3\n", "unsupported YAML tag '!custom'", 1),
        ("a.yaml", "a: &x [*x]\n", "recursive alias", 1),
        ("a.yaml", "1: one\n", "key '1' is not a string; quote it", 1),
        ("a.yaml", "? [a, b]\n: 1\n", "invalid YAML: found unhashable key", 1),
        ("a.yaml", "- 1\n", "has a list at the top level", 0),
        ("a.yaml", "just text\n", "has a string at the top level", 0),
        ("a.yaml", "", "is empty", 0),
        ("a.yaml", "---\n...\n", "is empty", 0),
        ("a.yaml", "a: \x07\n", "invalid YAML: character '\\x07' is not allowed", 1),
        ("a.json", '{"a": 1,}', "invalid JSON: Expecting property name", 1),
        ("a.json", '{"a": 1, "a": 2}', "duplicate key 'a'", 1),
        ("a.json", '{"a": NaN}', "NaN is not a number JSON allows", 0),
        ("a.json", "[1, 2]", "has a list at the top level", 0),
        ("a.json", "  \n", "is empty", 0),
        ("a.toml", "a = \n", "invalid TOML:", 1),
        ("a.toml", "a = 1\na = 2\n", "invalid TOML:", 2),
        ("a.toml", "a = inf\n", "a: inf is not a finite number", 1),
        ("a.toml", "# nothing\n", "is empty", 0),
        ("a.yaml", "[" * 5000, "nested too deeply", 0),
        ("a.json", "[" * 100000, "nested too deeply", 0),
    ],
)
def test_malformed_text_is_one_clear_issue(name: str, text: str, message: str, line: int) -> None:
    with pytest.raises(ConfigError) as info:
        read_text(text, name)
    (issue,) = info.value.issues
    assert issue.path == name
    assert message in str(issue)
    assert issue.line == line


def test_yaml_alias_bomb_is_refused() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 8)]
    with pytest.raises(ConfigError, match="too many nodes"):
        read_text("\n".join(lines) + "\n", "bomb.yaml")


def laughs(levels: int, width: int = 9) -> str:
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, ""])


def test_an_alias_bomb_is_refused_at_its_alias_before_anything_is_expanded() -> None:
    """Nine levels of nine: 387 million values once expanded; refused at the first alias that takes
    the expansion past MAX_ALIAS_VALUES, in memory proportional to the text."""
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as info:
            read_text(laughs(9), "bomb.yaml")
        _, peak_bytes = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (issue,) = info.value.issues
    assert (issue.line, issue.column) == (6, 10)  # the first *a4 of a5
    assert issue.message == (
        f"too many nodes: alias *a4 repeats 66,430 values, taking the file past the {MAX_ALIAS_VALUES:,} "
        "that aliases may add (a YAML alias bomb?)"
    )
    assert peak_bytes < 10 * 2**20


def test_aliases_below_the_limit_still_expand() -> None:
    data, _ = read_text(laughs(4), "ok.yaml")  # 9 x 7,381 values repeated: under the limit
    assert len(data["a4"]) == 9 and data["a4"][8][8][8][8] == ["lol"] * 9
    devices = "\n".join(f"  - {{<<: *gpu, name: d{i}}}" for i in range(2000))
    data, positions = read_text(
        f"gpu: &gpu {{peak_flops: 1 TFLOP/s, memory: 1 GiB}}\ndevices:\n{devices}\n", "m.yaml"
    )
    assert data["devices"][1999] == {"peak_flops": "1 TFLOP/s", "memory": "1 GiB", "name": "d1999"}
    assert positions[("devices", 1999, "name")] == (2002, 16)


def test_a_recursive_alias_is_placed_at_the_alias() -> None:
    with pytest.raises(ConfigError) as info:
        read_text("a: 1\nb: &x\n  c: [1, *x]\n", "r.yaml")
    (issue,) = info.value.issues
    assert (issue.line, issue.column, issue.message) == (3, 10, "recursive alias *x")


def test_a_file_too_large_says_its_size_in_human_units(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_bytes(b"#" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ConfigError) as info:
        read_file(path)
    expected = "is 16 MiB (16,777,217 bytes); configuration files are limited to 16 MiB"
    assert info.value.issues[0].message == expected


def test_yaml_merge_keys_work_and_are_placed(tmp_path: Path) -> None:
    text = "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n"
    data, pos = read_text(text, "m.yaml")
    assert data["use"] == {"x": 1, "y": 3}
    assert pos[("use", "y")] == (4, 3)


@pytest.mark.parametrize(
    ("content", "suffix", "message"),
    [
        (None, ".yaml", "does not exist"),
        (b"a: 1\n", ".ini", "unknown file extension '.ini'"),
        (b"a: 1\n", "", "unknown file extension '(none)'"),
        (b"\x00\x01\x02", ".yaml", "is a binary file"),
        (b"a: \xff\xfe\n", ".yaml", "is not UTF-8 text (bad byte 0xff)"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: bytes | None, suffix: str, message: str) -> None:
    path = tmp_path / f"f{suffix}"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        read_file(path)
    (issue,) = info.value.issues
    assert issue.path == str(path)
    assert message in issue.message


def test_directory_and_bom(tmp_path: Path) -> None:
    folder = tmp_path / "d.yaml"
    folder.mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        read_file(folder)
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_file(bom)[0] == {"a": 1}
