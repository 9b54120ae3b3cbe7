"""Schema-valid example values: arguments for every tool, answers for every output type.

:func:`example_value` builds one JSON value that a JSON schema accepts, for the keywords tool
and output schemas use: ``type`` (one or a list), ``enum``, ``const``, ``$ref`` / ``$defs``,
``anyOf`` / ``oneOf`` / ``allOf``, objects (``properties``, ``required``,
``additionalProperties``, ``minProperties``), arrays (``items``, ``prefixItems``,
``minItems`` / ``maxItems``, ``uniqueItems``), strings (``minLength`` / ``maxLength``, the
common ``format`` values, and a ``pattern`` when one of a few simple candidates matches it),
numbers (``minimum`` / ``maximum``, their exclusive forms, ``multipleOf``), booleans and null.
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Any, TypeGuard

__all__ = ["example_value"]

re_parser: Any = importlib.import_module("re._parser")  # the standard library's regex parser

MAX_DEPTH = 24
"""How deep the value may nest; past it only what is required is filled in."""

_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "duration": "P1D",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
    "json-pointer": "/a",
    "regex": "a",
    "binary": "eA==",
    "byte": "eA==",
    "password": "example",
}


class NoExample(ValueError):
    """No value could be made for a schema (a contradiction, or endless required nesting)."""


def example_value(schema: Any, *, variant: int = 0) -> Any:
    """A JSON value that ``schema`` accepts.

    Args:
        schema: a JSON schema (a dict; ``True`` accepts anything).
        variant: another number gives another value where the schema leaves room (the
            ``variant``-th enum member, a larger number, a longer string).

    Raises:
        ValueError: the schema accepts nothing this generator can make.
    """
    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}
    return _Maker(schema, defs if isinstance(defs, dict) else {}).value(schema, variant, 0)


class _Maker:
    def __init__(self, root: Any, defs: dict[str, Any]) -> None:
        self.root = root
        self.defs = defs

    def resolve(self, ref: str) -> Any:
        if ref == "#":
            return self.root
        if ref.startswith("#/$defs/") and ref[8:] in self.defs:
            return self.defs[ref[8:]]
        if ref.startswith("#/definitions/") and isinstance(self.root, dict):
            found = (self.root.get("definitions") or {}).get(ref[14:])
            if found is not None:
                return found
        raise NoExample(f"cannot follow $ref {ref!r}")

    def value(self, schema: Any, variant: int, depth: int) -> Any:
        if depth > 2 * MAX_DEPTH:
            raise NoExample("the schema requires values nested without end")
        if schema is True or schema == {}:
            return "example"
        if schema is False or not isinstance(schema, dict):
            raise NoExample(f"no value matches {schema!r}")
        if "$ref" in schema:
            target = self.resolve(schema["$ref"])
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return self.value(_merge(target, rest) if rest else target, variant, depth + 1)
        if "const" in schema:
            return schema["const"]
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return enum[variant % len(enum)]
        all_of = schema.get("allOf")
        if isinstance(all_of, list) and all_of:
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in all_of:
                if isinstance(part, dict) and "$ref" in part:
                    part = self.resolve(part["$ref"])
                merged = _merge(merged, part)
            return self.value(merged, variant, depth + 1)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                base = {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf")}
                return self._first(options, base, variant, depth)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if k != "null"] or kind
            kind = kinds[0] if kinds else None
        if kind is None:
            kind = _guess(schema)
        maker = getattr(self, f"_{kind}", None)
        if maker is None:
            raise NoExample(f"unknown type {kind!r}")
        return maker(schema, variant, depth)

    def _first(self, options: list[Any], base: dict[str, Any], variant: int, depth: int) -> Any:
        """The first option (not null, if another one works) that yields a value."""
        ordered = sorted(options, key=lambda o: isinstance(o, dict) and o.get("type") == "null")
        error: NoExample | None = None
        for option in ordered:
            try:
                return self.value(_merge(base, option) if base else option, variant, depth + 1)
            except NoExample as exc:
                error = exc
        raise error or NoExample("no option of anyOf yields a value")

    def _null(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        return None

    def _boolean(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        return variant % 2 == 0

    def _integer(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        low, low_open, high, high_open = _bounds(schema)
        lo = None if low is None else (math.floor(low) + 1 if low_open else math.ceil(low))
        hi = None if high is None else (math.ceil(high) - 1 if high_open else math.floor(high))
        value: float = (lo if lo is not None else min(hi, 1) if hi is not None else 1) + variant
        if hi is not None:
            value = min(value, hi)
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0:
            value = math.ceil(value / step) * step
            if hi is not None and value > hi:
                value = math.floor(hi / step) * step
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise NoExample(f"no integer fits {schema!r}")
        if value != int(value):
            raise NoExample(f"no integer fits {schema!r}")
        return int(value)

    def _number(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        low, _, high, _ = _bounds(schema)
        value: float
        if low is not None and high is not None:
            if high < low:
                raise NoExample(f"no number fits {schema!r}")
            value = low + (high - low) / (2 + variant)  # inside, whether bounds are open
        elif low is not None:
            value = low + 1 + variant
        elif high is not None:
            value = high - 1 - variant
        else:
            value = 1.5 + variant
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0:
            for candidate in (math.ceil(value / step) * step, math.floor(value / step) * step):
                if _within(candidate, schema):
                    return candidate
            raise NoExample(f"no multiple of {step} fits {schema!r}")
        return value

    def _string(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        low = schema.get("minLength", 0) or 0
        high = schema.get("maxLength")
        fmt = schema.get("format")
        text = _FORMATS.get(fmt, "example") if isinstance(fmt, str) else "example"
        if variant:
            text = f"{text}{variant}" if text == "example" else text
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            text = _matching(pattern, text, low, high)
        if len(text) < low:
            text = text + "x" * (low - len(text))
        if isinstance(high, int) and len(text) > high:
            text = text[:high]
        return text

    def _array(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        low = schema.get("minItems", 0) or 0
        high = schema.get("maxItems")
        out: list[Any] = []
        if isinstance(prefix, list):
            out = [self.value(p, variant, depth + 1) for p in prefix]
        wanted = max(low, len(out) if out else (1 if depth < MAX_DEPTH else 0))
        if isinstance(high, int):
            wanted = min(wanted, high)
        unique = schema.get("uniqueItems") is True
        while len(out) < wanted:
            if items is False:
                break
            item = self.value(items, variant + (len(out) if unique else 0), depth + 1)
            if unique and item in out:
                raise NoExample(f"cannot make {wanted} distinct items for {schema!r}")
            out.append(item)
        return out[:wanted] if isinstance(high, int) else out

    def _object(self, schema: dict[str, Any], variant: int, depth: int) -> Any:
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        out: dict[str, Any] = {}
        for key, sub in properties.items():
            if key in required or depth < MAX_DEPTH:
                try:
                    out[key] = self.value(sub, variant, depth + 1)
                except NoExample:
                    if key in required:
                        raise
        for key in required:
            if key not in out:  # required but not described
                extra = schema.get("additionalProperties", True)
                out[key] = self.value(extra if extra is not False else True, variant, depth + 1)
        wanted = schema.get("minProperties", 0) or 0
        extra = schema.get("additionalProperties", True)
        n = 0
        while len(out) < wanted and extra is not False:
            out[f"key{n}"] = self.value(extra, variant, depth + 1)
            n += 1
        return out


def _guess(schema: dict[str, Any]) -> str:
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "multipleOf")):
        return "number"
    return "string"


def _is_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounds(schema: dict[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    """The lower bound, whether it is open, the upper bound, whether it is open."""
    low: float | None = None
    low_open = False
    high: float | None = None
    high_open = False
    if _is_number(schema.get("minimum")):
        low = schema["minimum"]
    if _is_number(schema.get("exclusiveMinimum")) and (
        low is None or schema["exclusiveMinimum"] >= low
    ):
        low, low_open = schema["exclusiveMinimum"], True
    if _is_number(schema.get("maximum")):
        high = schema["maximum"]
    if _is_number(schema.get("exclusiveMaximum")) and (
        high is None or schema["exclusiveMaximum"] <= high
    ):
        high, high_open = schema["exclusiveMaximum"], True
    return low, low_open, high, high_open


def _within(value: float, schema: dict[str, Any]) -> bool:
    low, low_open, high, high_open = _bounds(schema)
    if low is not None and (value < low or (low_open and value == low)):
        return False
    return not (high is not None and (value > high or (high_open and value == high)))


def _matching(pattern: str, text: str, low: int, high: Any) -> str:
    """A string ``pattern`` finds a match in, within the length bounds (else ``text``)."""
    try:
        compiled = re.compile(pattern)
    except (re.error, RecursionError):
        return text
    candidates = [text]
    for extra in range(max(low, 1) + 1):
        try:
            candidates.append(_from_regex(re_parser.parse(pattern), extra))
        except (NoExample, re.error, RecursionError, ValueError):
            break
    size = max(low, 1)
    candidates += ["a" * size, "A" * size, "0" * size, "example_1", ""]
    for candidate in candidates:
        fits = len(candidate) >= low and (not isinstance(high, int) or len(candidate) <= high)
        if fits and compiled.search(candidate):
            return candidate
    return text


_CATEGORY_CHARS = {"DIGIT": "0", "WORD": "a", "SPACE": " "}


def _from_regex(parsed: Any, extra: int) -> str:
    """A string the parsed regular expression matches: each repeat taken ``extra`` times
    more than its minimum (where its maximum allows), the first branch of each choice."""
    out: list[str] = []
    for op, arg in parsed:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if arg != ord("a") else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_from_class(arg))
        elif name == "CATEGORY":
            out.append(_category(arg))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            count = low + extra if str(high) == "MAXREPEAT" else min(low + extra, high)
            out.append(_from_regex(sub, extra) * count)
        elif name == "SUBPATTERN":
            out.append(_from_regex(arg[-1], extra))
        elif name == "ATOMIC_GROUP":
            out.append(_from_regex(arg, extra))
        elif name == "BRANCH":
            out.append(_from_regex(arg[1][0], extra))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        else:
            raise NoExample(f"cannot generate a string for {name}")
    return "".join(out)


def _from_class(items: Any) -> str:
    if items and str(items[0][0]) == "NEGATE":
        chosen = "a"
        for candidate in "aZ0_- .":
            if not any(_class_has(item, candidate) for item in items[1:]):
                return candidate
        return chosen
    op, arg = items[0]
    name = str(op)
    if name == "LITERAL":
        return chr(arg)
    if name == "RANGE":
        return chr(arg[0])
    if name == "CATEGORY":
        return _category(arg)
    raise NoExample(f"cannot generate a character for {name}")


def _class_has(item: Any, char: str) -> bool:
    op, arg = item
    name = str(op)
    if name == "LITERAL":
        return chr(arg) == char
    if name == "RANGE":
        return bool(arg[0] <= ord(char) <= arg[1])
    if name == "CATEGORY":
        return _category(arg) == char or (char.isalnum() and "WORD" in str(arg))
    return True


def _category(arg: Any) -> str:
    name = str(arg)
    for key, char in _CATEGORY_CHARS.items():
        if name.endswith(key):
            return char
    if "NOT_DIGIT" in name:
        return "a"
    if "NOT_WORD" in name:
        return "-"
    if "NOT_SPACE" in name:
        return "a"
    raise NoExample(f"cannot generate a character for {name}")


def _merge(base: Any, extra: Any) -> Any:
    """Two schemas an instance must both match, merged shallowly (objects' properties and
    required lists joined)."""
    if not isinstance(base, dict) or not isinstance(extra, dict):
        return extra if isinstance(base, dict) and not base else base
    out = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = [*out[key], *(v for v in value if v not in out[key])]
        else:
            out[key] = value
    return out
