"""Read YAML, TOML and JSON text into plain data plus the line and column of every key and item.

Each reader returns ``(data, positions)``: ``positions`` maps a path into the data (a tuple of
mapping keys and list indices, ``()`` for the document) to the 1-based ``(line, column)`` where that
key or item starts. YAML positions are exact (from the parser's marks); JSON positions are exact
(a small scanner walks the text json has already accepted); TOML positions are best effort (a
scanner over the text tomllib has already accepted; anything it cannot place falls back to the
nearest enclosing key). Anything malformed raises :class:`~parplan.errors.ConfigError` with one
issue that names the line, never a parser traceback.

>>> data, positions = read_text("a:\\n  b: [1, 2]\\n", "x.yaml")
>>> data, positions[("a", "b", 1)]
({'a': {'b': [1, 2]}}, (2, 10))
"""

from __future__ import annotations

import bisect
import json
import math
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from parplan.config.units import human_bytes
from parplan.errors import ConfigError, Issue

Loc = tuple[str | int, ...]
"""A path into loaded data: mapping keys and list indices."""
Positions = dict[Loc, tuple[int, int]]
"""Where each key or item of a document starts: 1-based (line, column)."""

FORMATS: dict[str, str] = {".yaml": "yaml", ".yml": "yaml", ".toml": "toml", ".json": "json"}
"""File extensions parplan reads and writes, and their format."""
_EXTENSIONS = ".yaml, .yml, .toml or .json"

MAX_FILE_BYTES = 16 * 2**20
"""Larger files are refused: a configuration is kilobytes, and a huge one is a mistake."""
MAX_ALIAS_VALUES = 100_000
"""The most values YAML aliases may add to a document once expanded. An alias repeats its anchor's
whole subtree, so nested aliases grow a small file exponentially (nine levels of nine aliases make
387 million values, the "billion laughs"); the reader counts while it composes, before anything is
expanded, and refuses at the alias that crosses this line."""
_MAX_NODES = 1_000_000  # bounds pathological files without aliases


def file_format(path: str | Path) -> str:
    """``yaml``, ``toml`` or ``json`` from the extension; :class:`ConfigError` for anything else."""
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError(
            Issue(str(path), "", f"has an unknown file extension {suffix or '(none)'!r}; use {_EXTENSIONS}")
        )
    return FORMATS[suffix]


def read_file(path: str | Path) -> tuple[Any, Positions]:
    """Read and parse one file: its data (a mapping) and its key positions."""
    shown = str(path)
    fmt = file_format(path)
    p = Path(path)
    try:
        if p.is_dir():
            raise ConfigError(Issue(shown, "", "is a directory, not a file"))
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            limit = human_bytes(MAX_FILE_BYTES, precision="short")
            shown_size = human_bytes(size, precision="short")
            message = f"is {shown_size} ({size:,} bytes); configuration files are limited to {limit}"
            raise ConfigError(Issue(shown, "", message))
        raw = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(Issue(shown, "", "does not exist")) from None
    except OSError as exc:
        raise ConfigError(Issue(shown, "", f"cannot be read: {exc.strerror or exc}")) from None
    return read_text(_decode(raw, shown), shown, fmt)


def _decode(raw: bytes, shown: str) -> str:
    if b"\x00" in raw:
        raise ConfigError(Issue(shown, "", "is a binary file, not YAML, TOML or JSON text"))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(
            Issue(shown, "", f"is not UTF-8 text (bad byte 0x{raw[exc.start]:02x})", line=line, column=1)
        ) from None


def read_text(text: str, shown: str, fmt: str | None = None) -> tuple[Any, Positions]:
    """Parse ``text`` in ``fmt`` (default: from the extension of ``shown``, the name used in messages).

    The top level must be a non-empty mapping.
    """
    fmt = fmt or file_format(shown)
    readers: dict[str, Callable[[str, str], tuple[Any, Positions]]] = {
        "yaml": _read_yaml,
        "toml": _read_toml,
        "json": _read_json,
    }
    try:
        data, positions = readers[fmt](text, shown)
    except RecursionError:
        raise ConfigError(Issue(shown, "", "is nested too deeply to be a configuration file")) from None
    if data is None or data == {}:
        raise ConfigError(Issue(shown, "", "is empty; expected a mapping of keys to values"))
    if not isinstance(data, dict):
        kind = _type_name(data)
        raise ConfigError(
            Issue(shown, "", f"has {kind} at the top level; expected a mapping of keys to values")
        )
    positions.setdefault((), (1, 1))
    return data, positions


def _type_name(value: Any) -> str:
    """How a file would call a value's type: 'a list', 'a string', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


# -- YAML ---------------------------------------------------------------------------------------------


class _DuplicateKeyError(yaml.MarkedYAMLError):
    """A mapping names the same key twice (plain PyYAML silently keeps the last)."""


class _AliasBombError(yaml.MarkedYAMLError):
    """Aliases would expand the document past :data:`MAX_ALIAS_VALUES`, or an alias names its own
    enclosing anchor."""


class PositionLoader(yaml.SafeLoader):
    """PyYAML's safe loader (no Python tags), refusing duplicate keys and alias bombs, that can
    report where every mapping key and sequence item starts (:meth:`positions`).

    While composing it keeps the expanded size of every finished node (itself plus its children's
    expanded sizes, in a dict by node), so the cost of each alias is known when it is met: memory
    stays proportional to the text, never to the expansion.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._expanded: dict[int, int] = {}  # id(node) -> values it stands for once expanded
        self._alias_values = 0
        self._values = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            node: Node | None = super().compose_node(parent, index)
            size = self._expanded.get(id(node))
            if size is None:  # the anchor is still open: the alias is inside what it names
                mark = event.start_mark
                raise _AliasBombError(problem=f"recursive alias *{event.anchor}", problem_mark=mark)
            self._alias_values += size
            if self._alias_values > MAX_ALIAS_VALUES:
                raise _AliasBombError(
                    problem=f"too many nodes: alias *{event.anchor} repeats {size:,} values, taking the file "
                    f"past the {MAX_ALIAS_VALUES:,} that aliases may add (a YAML alias bomb?)",
                    problem_mark=event.start_mark,
                )
            return node
        node = super().compose_node(parent, index)
        if node is None:  # pragma: no cover - PyYAML composes a node for every node event
            return node
        if isinstance(node, MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, SequenceNode):
            children = list(node.value)
        else:
            children = []
        self._expanded[id(node)] = 1 + sum(self._expanded[id(c)] for c in children)
        self._values += 1
        if self._values > _MAX_NODES:
            mark = node.start_mark
            raise _AliasBombError(problem=f"has too many nodes (over {_MAX_NODES:,})", problem_mark=mark)
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node)
            if key in seen:
                first = seen[key].start_mark
                raise _DuplicateKeyError(
                    problem=f"duplicate key {key!r} (first at line {first.line + 1})",
                    problem_mark=key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def positions(self, root: Node, shown: str) -> Positions:
        """Walk the composed (and constructed, so merges are flattened) node tree."""
        out: Positions = {}
        budget = [_MAX_NODES]

        def walk(node: Node, loc: Loc, active: frozenset[int]) -> None:
            budget[0] -= 1
            if budget[0] < 0:
                raise ConfigError(Issue(shown, "", "has too many nodes (alias expansion?)"))
            if id(node) in active:
                mark = node.start_mark
                raise ConfigError(Issue(shown, "", "has a recursive alias", mark.line + 1, mark.column + 1))
            inner = active | {id(node)}
            if isinstance(node, MappingNode):
                for key_node, value_node in node.value:
                    mark = key_node.start_mark
                    if not isinstance(key_node, ScalarNode):
                        line, col = mark.line + 1, mark.column + 1
                        raise ConfigError(Issue(shown, _dotted(loc), "keys must be plain strings", line, col))
                    key = self.construct_object(key_node, deep=True)
                    if not isinstance(key, str):
                        raise ConfigError(
                            Issue(
                                shown,
                                _dotted(loc),
                                f"key {key_node.value or 'null'!r} is not a string; quote it",
                                mark.line + 1,
                                mark.column + 1,
                            )
                        )
                    out[(*loc, key)] = (mark.line + 1, mark.column + 1)
                    walk(value_node, (*loc, key), inner)
            elif isinstance(node, SequenceNode):
                for i, item in enumerate(node.value):
                    mark = item.start_mark
                    out[(*loc, i)] = (mark.line + 1, mark.column + 1)
                    walk(item, (*loc, i), inner)

        walk(root, (), frozenset())
        return out


def _read_yaml(text: str, shown: str) -> tuple[Any, Positions]:
    loader: PositionLoader | None = None
    try:
        loader = PositionLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None, {}
        data = loader.construct_document(node)
        return data, loader.positions(node, shown)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError(_yaml_issue(exc, shown)) from None
    except yaml.reader.ReaderError as exc:
        char = chr(exc.character) if isinstance(exc.character, int) else exc.character
        before = text[: max(0, exc.position)]
        line, column = before.count("\n") + 1, len(before) - (before.rfind("\n") + 1) + 1
        message = f"invalid YAML: character {char!r} is not allowed"
        raise ConfigError(Issue(shown, "", message, line, column)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(Issue(shown, "", f"invalid YAML: {exc}")) from None
    finally:
        if loader is not None:
            loader.dispose()


def _yaml_issue(exc: yaml.MarkedYAMLError, shown: str) -> Issue:
    mark = exc.problem_mark or exc.context_mark
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
    problem = (exc.problem or "").strip()
    tag = re.search(r"constructor for the tag '([^']*)'", problem)
    if tag:
        name = tag.group(1).replace("tag:yaml.org,2002:", "!!")
        return Issue(shown, "", f"unsupported YAML tag {name!r}; parplan reads plain YAML only", line, column)
    if isinstance(exc, _DuplicateKeyError | _AliasBombError):
        return Issue(shown, "", problem, line, column)
    context = (exc.context or "").strip()
    message = f"invalid YAML: {problem}" + (f" ({context})" if context and context != problem else "")
    return Issue(shown, "", message, line, column)


# -- JSON ---------------------------------------------------------------------------------------------


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JSONDuplicateError(key)
        out[key] = value
    return out


class _JSONDuplicateError(Exception):
    pass


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def _read_json(text: str, shown: str) -> tuple[Any, Positions]:
    if not text.strip():
        return None, {}
    try:
        data = json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(Issue(shown, "", f"invalid JSON: {exc.msg}", exc.lineno, exc.colno)) from None
    except _JSONDuplicateError as exc:
        key = exc.args[0]
        line, col = _find_key(text, key, json_style=True)
        raise ConfigError(Issue(shown, "", f"duplicate key {key!r}", line, col)) from None
    except ValueError as exc:
        raise ConfigError(Issue(shown, "", f"invalid JSON: {exc}")) from None
    try:
        positions = _JSONScanner(text).scan()
    except (ValueError, IndexError):  # pragma: no cover - json accepted the text; positions are a nicety
        positions = {}
    return data, positions


class _Cursor:
    """Offset-to-(line, column) bookkeeping shared by the JSON and TOML scanners."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def where(self, offset: int | None = None) -> tuple[int, int]:
        off = self.i if offset is None else offset
        line = bisect.bisect_right(self._line_starts, off)
        return line, off - self._line_starts[line - 1] + 1

    def peek(self) -> str:
        return self.text[self.i] if self.i < len(self.text) else ""


class _JSONScanner(_Cursor):
    def scan(self) -> Positions:
        out: Positions = {}
        self._ws()
        self._value((), out)
        return out

    def _ws(self) -> None:
        while self.peek() in (" ", "\t", "\n", "\r"):
            self.i += 1

    def _string(self) -> str:
        value, self.i = json.decoder.scanstring(self.text, self.i + 1)  # type: ignore[attr-defined]
        return str(value)

    def _value(self, loc: Loc, out: Positions) -> None:
        ch = self.peek()
        if ch == "{":
            self.i += 1
            self._ws()
            while self.peek() != "}":
                where = self.where()
                key = self._string()
                out[(*loc, key)] = where
                self._ws()
                self.i += 1  # ':'
                self._ws()
                self._value((*loc, key), out)
                self._ws()
                if self.peek() == ",":
                    self.i += 1
                    self._ws()
            self.i += 1
        elif ch == "[":
            self.i += 1
            self._ws()
            index = 0
            while self.peek() != "]":
                out[(*loc, index)] = self.where()
                self._value((*loc, index), out)
                index += 1
                self._ws()
                if self.peek() == ",":
                    self.i += 1
                    self._ws()
            self.i += 1
        elif ch == '"':
            self._string()
        else:
            m = re.compile(r"[^,\]\}\s]+").match(self.text, self.i)
            if m is None:
                raise ValueError("unexpected character")
            self.i = m.end()


def _find_key(text: str, key: str, json_style: bool) -> tuple[int, int]:
    """Where a key is written last (for duplicate-key messages); (0, 0) if not found."""
    pattern = re.escape(json.dumps(key)) + r"\s*:" if json_style else rf"(?m)^\s*{re.escape(key)}\s*="
    found = list(re.finditer(pattern, text))
    if not found:
        return 0, 0
    cursor = _Cursor(text)
    start = found[-1].start()
    if not json_style:
        start += len(found[-1].group(0)) - len(found[-1].group(0).lstrip())
    return cursor.where(start)


# -- TOML ---------------------------------------------------------------------------------------------

_TOML_ERROR_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _read_toml(text: str, shown: str) -> tuple[Any, Positions]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc.args[0]) if exc.args else str(exc)
        m = _TOML_ERROR_AT.search(message)
        line, column = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        message = _TOML_ERROR_AT.sub("", message).replace(" (at end of document)", "")
        message = message[:1].lower() + message[1:]
        raise ConfigError(Issue(shown, "", f"invalid TOML: {message}", line, column)) from None
    if not data:
        return None, {}
    try:
        positions = _TOMLScanner(text).scan()
    except (ValueError, IndexError):  # pragma: no cover - best effort
        positions = {}
    _check_toml_numbers(data, (), shown, positions)
    return data, positions


def _check_toml_numbers(value: Any, loc: Loc, shown: str, positions: Positions) -> None:
    """TOML allows inf and nan; parplan's specs do not (they must also fit in JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        line, column = positions.get(loc, (0, 0))
        raise ConfigError(Issue(shown, _dotted(loc), f"{value} is not a finite number", line, column))
    if isinstance(value, dict):
        for k, v in value.items():
            _check_toml_numbers(v, (*loc, k), shown, positions)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_toml_numbers(v, (*loc, i), shown, positions)


class _TOMLScanner(_Cursor):
    """Finds where keys, tables and array items start in text tomllib has accepted (best effort)."""

    def scan(self) -> Positions:
        out: Positions = {}
        table: Loc = ()
        aot_index: dict[Loc, int] = {}  # array-of-tables path (with parents' indices) -> current index
        while True:
            self._skip(newlines=True)
            ch = self.peek()
            if not ch:
                return out
            if ch == "[":
                where = self.where()
                double = self.text.startswith("[[", self.i)
                self.i += 2 if double else 1
                self._skip()
                keys = self._key()
                self._skip()
                self.i += 2 if double else 1
                table = self._resolve(keys, aot_index)
                if double:
                    index = aot_index.get(table, -1) + 1
                    aot_index[table] = index
                    out.setdefault(table, where)
                    table = (*table, index)
                out.setdefault(table, where)
            else:
                where = self.where()
                keys = self._key()
                _record(out, table, keys, where)
                self._skip()
                self.i += 1  # '='
                self._skip()
                self._value((*table, *keys), out)
            self._skip_to_eol()

    def _resolve(self, keys: list[str], aot_index: dict[Loc, int]) -> Loc:
        loc: Loc = ()
        for n, key in enumerate(keys):
            loc = (*loc, key)
            if loc in aot_index and n < len(keys) - 1:
                loc = (*loc, aot_index[loc])
        return loc

    def _skip(self, newlines: bool = False) -> None:
        while True:
            ch = self.peek()
            if ch in (" ", "\t") or (newlines and ch in ("\n", "\r")):
                self.i += 1
            elif ch == "#":
                self._skip_comment()
            else:
                return

    def _skip_comment(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end < 0 else end

    def _skip_to_eol(self) -> None:
        self._skip()
        if self.peek() in ("\n", "\r"):
            self.i += 1

    def _key(self) -> list[str]:
        keys: list[str] = []
        while True:
            self._skip()
            ch = self.peek()
            if ch in ('"', "'"):
                keys.append(self._string())
            else:
                m = _BARE_KEY.match(self.text, self.i)
                if m is None:
                    raise ValueError("expected a key")
                keys.append(m.group(0))
                self.i = m.end()
            self._skip()
            if self.peek() != ".":
                return keys
            self.i += 1

    def _string(self) -> str:
        quote = self.peek()
        if self.text.startswith(quote * 3, self.i):
            end = self.text.index(quote * 3, self.i + 3)
            while self.text.startswith(quote, end + 3):  # up to two quotes may close a multi-line string
                end += 1
            raw = self.text[self.i : end + 3]
            self.i = end + 3
            return raw
        j = self.i + 1
        while self.text[j] != quote:
            j += 2 if quote == '"' and self.text[j] == "\\" else 1
        raw = self.text[self.i : j + 1]
        self.i = j + 1
        if quote == '"':
            return str(tomllib.loads(f"k = {raw}")["k"])
        return raw[1:-1]

    def _value(self, loc: Loc, out: Positions) -> None:
        ch = self.peek()
        if ch in ('"', "'"):
            self._string()
        elif ch == "[":
            self.i += 1
            index = 0
            while True:
                self._skip(newlines=True)
                if self.peek() == "]":
                    self.i += 1
                    return
                out.setdefault((*loc, index), self.where())
                self._value((*loc, index), out)
                index += 1
                self._skip(newlines=True)
                if self.peek() == ",":
                    self.i += 1
        elif ch == "{":
            self.i += 1
            while True:
                self._skip()
                if self.peek() == "}":
                    self.i += 1
                    return
                where = self.where()
                keys = self._key()
                _record(out, loc, keys, where)
                self._skip()
                self.i += 1  # '='
                self._skip()
                self._value((*loc, *keys), out)
                self._skip()
                if self.peek() == ",":
                    self.i += 1
        else:
            m = re.compile(r"[^,\]\}\s#]+(?:[ T][0-9:.+\-Z]+)?").match(self.text, self.i)
            if m is None:
                raise ValueError("unexpected character")
            self.i = m.end()


def _record(out: Positions, base: Loc, keys: list[str], where: tuple[int, int]) -> None:
    """A dotted key ``a.b.c = 1`` places ``a``, ``a.b`` and ``a.b.c`` (unless known already)."""
    for n in range(1, len(keys) + 1):
        out.setdefault((*base, *keys[:n]), where)


def _dotted(loc: Loc) -> str:
    """``plans[0].strategy.num_replicas`` from ``("plans", 0, "strategy", "num_replicas")``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out
