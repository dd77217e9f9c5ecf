"""Where things are in the files, and pydantic's errors rewritten as short, located issues.

A :class:`Source` remembers which file each part of a loaded document came from (a scenario's
cluster may live in its own file) and where every key starts, so an error found anywhere, by
pydantic or by the checks in :mod:`parplan.config.checks`, becomes one
:class:`~parplan.errors.Issue` naming the right file, line, column and field path, e.g.
``strategies/dp.yaml:7:5 aggregation.algorithm.arity: must be >= 2``.

Field paths use the file's own keys (``bandwidth``, not ``bandwidth_Bps``), list indices in
brackets (``plans[2].strategy``), and leave out pydantic's tagged-union segments.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from parplan.config.readers import Loc, Positions, _dotted, _type_name
from parplan.errors import Issue

Severity = Literal["error", "warning", "info"]


def dotted(loc: Loc) -> str:
    """``plans[0].strategy.num_replicas`` from ``("plans", 0, "strategy", "num_replicas")``."""
    return _dotted(loc)


@dataclass(frozen=True)
class Graft:
    """One file's part of a loaded document: the file's content at ``inner`` sits at ``prefix``."""

    prefix: Loc
    path: str
    positions: Positions
    inner: Loc = ()


@dataclass
class Source:
    """The files a loaded spec came from, for turning a path into the data into file:line:column.

    The first graft is the file that was loaded; later ones are the files it references.
    """

    grafts: list[Graft] = field(default_factory=list)

    @classmethod
    def single(cls, path: str, positions: Positions) -> Source:
        """A source made of one file."""
        return cls([Graft((), path, positions)])

    @property
    def path(self) -> str:
        """The file that was loaded."""
        return self.grafts[0].path if self.grafts else ""

    def add(self, graft: Graft) -> None:
        """Record that a referenced file's content sits at ``graft.prefix``."""
        self.grafts.append(graft)

    def locate(self, loc: Loc) -> tuple[str, int, int, Loc]:
        """The file, 1-based line and column (0 when unknown) and the path in that file's keys."""
        best: Graft | None = None
        for graft in self.grafts:
            n = len(graft.prefix)
            if loc[:n] == graft.prefix and (best is None or n > len(best.prefix)):
                best = graft
        if best is None:
            return "", 0, 0, loc
        rel = (*best.inner, *loc[len(best.prefix) :])
        for n in range(len(rel), -1, -1):
            where = best.positions.get(rel[:n])
            if where is not None:
                return best.path, where[0], where[1], rel
        return best.path, 0, 0, rel

    def issue(self, loc: Loc, message: str, severity: Severity = "error") -> Issue:
        """An issue about the value at ``loc`` (a path into the loaded document)."""
        path, line, column, rel = self.locate(loc)
        return Issue(path, dotted(rel), message, line, column, severity=severity)


def make_issue(source: Source | None, loc: Loc, message: str, severity: Severity = "error") -> Issue:
    """:meth:`Source.issue`, or an issue with only a field path when there is no source."""
    if source is None:
        return Issue("", dotted(loc), message, severity=severity)
    return source.issue(loc, message, severity)


# -- walking pydantic types along an error location ----------------------------------------------------


def _unwrap(tp: Any) -> Any:
    """Strip ``Annotated`` and ``X | None`` down to the type that matters for walking."""
    while True:
        origin = get_origin(tp)
        if origin is typing.Annotated:
            tp = get_args(tp)[0]
            continue
        if origin in (Union, types.UnionType):
            args = [a for a in get_args(tp) if a is not type(None)]
            if len(args) == 1:
                tp = args[0]
                continue
        return tp


def _union_members(tp: Any) -> list[Any] | None:
    if get_origin(tp) in (Union, types.UnionType):
        return [_unwrap(a) for a in get_args(tp) if a is not type(None)]
    return None


def _tag_of(model: Any) -> tuple[str, str] | None:
    """The discriminator key and tag of a union member model, e.g. ("kind", "data_parallel")."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    for key in ("kind", "name"):
        info = model.model_fields.get(key)
        if info is not None and get_origin(info.annotation) is Literal:
            return key, str(get_args(info.annotation)[0])
    return None


def union_tags(tp: Any) -> tuple[str, list[str]] | None:
    """For a tagged union type: its discriminator key and the valid tags."""
    members = _union_members(_unwrap(tp))
    if not members:
        return None
    tags = [t for t in (_tag_of(m) for m in members) if t is not None]
    if not tags:
        return None
    return tags[0][0], [t[1] for t in tags]


def _field(model: type[BaseModel], key: str) -> tuple[str, FieldInfo] | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return name, info
    return None


def file_keys(model: type[BaseModel]) -> list[str]:
    """The keys a file may use for a model: aliases where there are ones."""
    return [info.alias or name for name, info in model.model_fields.items()]


@dataclass
class _Walk:
    loc: Loc
    end_type: Any
    parent_model: type[BaseModel] | None
    value: Any
    found: bool


def walk_loc(root_type: Any, data: Any, loc: Iterable[str | int]) -> _Walk:
    """Follow a pydantic error location through the types and the data: the cleaned location (the
    file's keys, no union tags), the type expected at its end, the model holding its last key, and
    the value found there."""
    out: list[str | int] = []
    tp: Any = root_type
    node: Any = data
    found = True
    parent: type[BaseModel] | None = None
    for seg in loc:
        tp = _unwrap(tp)
        members = _union_members(tp)
        if members is not None:
            chosen = next((m for m in members if (t := _tag_of(m)) is not None and t[1] == seg), None)
            tp = chosen if chosen is not None else Any
            continue  # a union member label, not a key of the file
        if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(seg, str):
            parent = tp
            hit = _field(tp, seg)
            key = seg
            if hit is not None and isinstance(node, dict) and seg not in node:
                key = next((k for k in (hit[1].alias, hit[0]) if k is not None and k in node), seg)
            out.append(key)
            tp = hit[1].annotation if hit is not None else Any
            found, node = _descend(node, key, found)
            continue
        origin = get_origin(tp)
        args = get_args(tp)
        if origin in (tuple, list) and isinstance(seg, int):
            if origin is tuple and args and args[-1] is not Ellipsis:
                tp = args[seg] if seg < len(args) else Any
            else:
                tp = args[0] if args else Any
        elif origin is dict:
            tp = args[1] if len(args) == 2 else Any
        else:
            tp = Any
        out.append(seg)
        found, node = _descend(node, seg, found)
    return _Walk(tuple(out), tp, parent, node if found else None, found)


def _descend(node: Any, seg: str | int, found: bool) -> tuple[bool, Any]:
    if not found:
        return False, None
    if isinstance(node, dict) and seg in node:
        return True, node[seg]
    if isinstance(node, list | tuple) and isinstance(seg, int) and 0 <= seg < len(node):
        return True, node[seg]
    return False, None


# -- messages ------------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    """A value as the user wrote it, for messages."""
    if isinstance(value, dict | list | tuple):
        return _type_name(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bound(value: Any) -> str:
    """A schema bound as a person writes it: ``1``, not ``1.0``; ``0.5`` stays."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _plural(n: Any, word: str) -> str:
    return f"{n} {word}" + ("" if str(n) == "1" else "s")


def _message(err: Any, walk: _Walk) -> tuple[str, Loc]:
    """A short human message for one pydantic error, and the location to report it at."""
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    value = err.get("input")
    loc = walk.loc
    if kind == "missing":
        return "required key is missing", loc
    if kind == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        valid = file_keys(walk.parent_model) if walk.parent_model is not None else []
        close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
        if close:
            return f"unknown key {key!r}; did you mean {close[0]!r}?", loc
        return f"unknown key {key!r}; valid keys: {', '.join(valid)}", loc
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        tags = union_tags(walk.end_type)
        disc = str(ctx.get("discriminator", "'kind'")).strip("'")
        tag_list = ", ".join(tags[1]) if tags else str(ctx.get("expected_tags", ""))
        if kind == "union_tag_not_found":
            return f"missing {disc!r}; one of: {tag_list}", (*loc, disc)
        return f"unknown {disc} {ctx.get('tag')!r}; valid: {tag_list}", (*loc, disc)
    if kind in ("value_error", "assertion_error"):
        error = ctx.get("error")
        return str(error) if error is not None else err["msg"], loc
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"expected an integer, got {_show(value)}", loc
    if kind in ("float_parsing", "float_type"):
        return f"expected a number, got {_show(value)}", loc
    if kind == "finite_number":
        return f"must be a finite number, got {_show(value)}", loc
    if kind in ("bool_parsing", "bool_type"):
        return f"expected true or false, got {_show(value)}", loc
    if kind in ("string_type", "str_type"):
        return f"expected a string, got {_type_name(value)}", loc
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping, got {_type_name(value)}", loc
    if kind in ("list_type", "tuple_type", "iterable_type"):
        return f"expected a list, got {_type_name(value)}", loc
    bounds = {
        "greater_than_equal": (">=", "ge"),
        "greater_than": (">", "gt"),
        "less_than_equal": ("<=", "le"),
        "less_than": ("<", "lt"),
    }
    if kind in bounds:
        op, key = bounds[kind]
        return f"must be {op} {_bound(ctx.get(key))}, got {_show(value)}", loc
    if kind == "too_short":
        return f"needs at least {_plural(ctx.get('min_length'), 'item')}", loc
    if kind == "too_long":
        return f"takes at most {_plural(ctx.get('max_length'), 'item')}", loc
    if kind == "string_too_short":
        return "must not be empty", loc
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}, got {_show(value)}", loc
    if kind == "string_pattern_mismatch":
        return f"{_show(value)} does not match {ctx.get('pattern')!r}", loc
    msg = str(err["msg"])
    return msg[:1].lower() + msg[1:], loc


def translate(
    error: ValidationError, root_type: Any, data: Any, source: Source | None, skip: Iterable[Loc] = ()
) -> list[Issue]:
    """Every error of a pydantic :class:`ValidationError` as a located issue, in file order.

    Errors at or under a location in ``skip`` (a reference that could not be loaded, already
    reported) are left out.
    """
    skipped = list(skip)
    errors = error.errors(include_url=False)
    locs = [tuple(e["loc"]) for e in errors]
    walks = [walk_loc(root_type, data, loc) for loc in locs]
    typos = set()  # (mapping, key): a missing key the user most likely misspelled
    for err, walk in zip(errors, walks, strict=True):
        if err["type"] == "extra_forbidden" and walk.parent_model is not None and walk.loc:
            valid = file_keys(walk.parent_model)
            close = difflib.get_close_matches(str(walk.loc[-1]), valid, n=1, cutoff=0.6)
            if close:
                typos.add((walk.loc[:-1], close[0]))
    issues: list[Issue] = []
    for err, loc, walk in zip(errors, locs, walks, strict=True):
        if err["type"] == "too_short" and any(o[: len(loc)] == loc and len(o) > len(loc) for o in locs):
            continue  # a list emptied by its own failed items: the items' errors say it
        if err["type"] == "missing" and walk.loc and (walk.loc[:-1], str(walk.loc[-1])) in typos:
            continue  # "unknown key 'bandwith'; did you mean 'bandwidth'?" says it
        message, at = _message(err, walk)
        if any(at[: len(s)] == s for s in skipped):
            continue
        issue = make_issue(source, at, message)
        if issue not in issues:
            issues.append(issue)
    order = {g.path: i for i, g in enumerate(source.grafts)} if source is not None else {}
    return sorted(issues, key=lambda i: (order.get(i.path, len(order)), i.line, i.column))
