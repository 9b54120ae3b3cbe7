"""JSON schemas for native structured output, in the dialects the APIs accept.

A typed answer's schema is pydantic's. The APIs accept narrower dialects:

- **OpenAI strict** (``response_format`` with ``"strict": true``): every object has
  ``additionalProperties: false`` and lists every property as required, so an optional field
  must accept ``null``; ``$defs`` and ``$ref`` work; a handful of keywords are supported.
  :func:`openai_strict_schema` returns that form, or ``None`` when the schema cannot be made
  strict without changing what it accepts (a free-form ``dict``, an optional field that does
  not accept ``null``, ``Any``, tuples...): the provider then sends the plain schema with
  ``"strict": false``.
- **Anthropic** (``output_config.format``): every object has ``additionalProperties: false``;
  optional properties are fine. :func:`anthropic_schema` returns that form, or ``None`` when
  the schema has a free-form object or ``Any`` (the agent then uses the ``final_result`` tool).

Either way, a keyword the dialect lacks (``minLength``, ``maximum``...) is removed and written
into the node's ``description``, so the model still reads it; the answer is validated against
the full output type afterwards, so a violation goes back to the model like any other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

__all__ = [
    "FormatCache",
    "accepts_null",
    "anthropic_schema",
    "openai_strict_schema",
    "schema_name",
]

Dialect = Literal["openai", "anthropic"]

_COMMON = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "anyOf",
        "enum",
        "const",
        "description",
        "title",
        "$ref",
        "$defs",
    }
)
_KEEP: dict[Dialect, frozenset[str]] = {
    "openai": _COMMON
    | {
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minItems",
        "maxItems",
    },
    "anthropic": _COMMON | {"format", "minItems", "allOf"},
}
_FORMATS: dict[Dialect, frozenset[str]] = {
    "openai": frozenset(
        {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
    ),
    "anthropic": frozenset(
        {
            "date-time",
            "time",
            "date",
            "duration",
            "email",
            "hostname",
            "uri",
            "ipv4",
            "ipv6",
            "uuid",
        }
    ),
}
_STRUCTURAL = frozenset({"additionalProperties", "properties", "items", "required"})
"""Keywords only an object or array node takes (written by their own step)."""
_DROPPED = frozenset({"default", "examples", "discriminator", "$schema", "$id", "$comment"})
"""Annotations that constrain nothing: removed without a note."""

OPENAI_MAX_DEPTH = 10
OPENAI_MAX_PROPERTIES = 5000


class NotRepresentable(ValueError):
    """The schema cannot be said in the dialect without changing what it accepts."""


def openai_strict_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The OpenAI strict form of ``schema``, or ``None`` when it cannot be made strict."""
    try:
        return _Transform("openai", schema).root(schema)
    except (NotRepresentable, RecursionError):
        return None


def anthropic_schema(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The Anthropic ``output_config.format`` form of ``schema``, or ``None``."""
    try:
        return _Transform("anthropic", schema).root(schema)
    except (NotRepresentable, RecursionError):
        return None


def schema_name(name: str) -> str:
    """``name`` as a schema name the APIs accept (``[a-zA-Z0-9_-]{1,64}``)."""
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)[:64] or "output"


def accepts_null(node: Any, defs: dict[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``node`` (a JSON schema) accepts ``null`` (``$ref`` resolved in ``defs``)."""
    if not isinstance(node, dict):
        return node is True
    kind = node.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return True
    if "const" in node and node["const"] is None:
        return True
    enum = node.get("enum")
    if isinstance(enum, list) and None in enum:
        return True
    for key in ("anyOf", "oneOf"):
        variants = node.get(key)
        if isinstance(variants, list) and any(accepts_null(v, defs, seen) for v in variants):
            return True
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and ref not in seen:
        return accepts_null(defs.get(ref[8:]), defs, seen | {ref})
    return False


class _Transform:
    """One walk over a schema, producing the dialect's form (raises NotRepresentable)."""

    def __init__(self, dialect: Dialect, schema: dict[str, Any]) -> None:
        self.dialect = dialect
        self.keep = _KEEP[dialect]
        self.formats = _FORMATS[dialect]
        self.strict = dialect == "openai"
        defs = schema.get("$defs")
        self.defs: dict[str, Any] = defs if isinstance(defs, dict) else {}
        self.properties = 0

    def root(self, schema: dict[str, Any]) -> dict[str, Any]:
        out = self.node(schema, 1)
        if out.get("type") != "object":
            raise NotRepresentable("the root is not an object")
        if self.defs:
            out["$defs"] = {name: self.node(d, 1) for name, d in self.defs.items()}
        return out

    def node(self, node: Any, depth: int) -> dict[str, Any]:
        if not isinstance(node, dict):
            raise NotRepresentable("a schema node that is not an object")
        if self.strict and depth > OPENAI_MAX_DEPTH:
            raise NotRepresentable(f"nested more than {OPENAI_MAX_DEPTH} levels")
        node = dict(node)
        out: dict[str, Any] = {}
        notes: dict[str, Any] = {}
        ref = node.pop("$ref", None)
        if ref is not None:
            if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/$defs/")):
                raise NotRepresentable(f"a $ref the APIs cannot follow: {ref!r}")
            return {"$ref": ref}  # siblings of a $ref are not allowed; they only annotate
        node.pop("$defs", None)
        kind = node.pop("type", None)
        if isinstance(kind, list):
            if not kind:
                raise NotRepresentable("an empty type list")
            variants = [{"type": k} for k in kind]
            if "anyOf" in node or "oneOf" in node:
                raise NotRepresentable("a type list beside anyOf")
            node["anyOf"] = variants
            kind = None
        one_of = node.pop("oneOf", None)
        if one_of is not None:
            if "anyOf" in node:
                raise NotRepresentable("both anyOf and oneOf")
            node["anyOf"] = one_of
        all_of = node.pop("allOf", None)
        if isinstance(all_of, list) and len(all_of) == 1 and kind is None:
            merged = {**all_of[0], **{k: v for k, v in node.items() if k != "anyOf"}}
            if "anyOf" in node:
                raise NotRepresentable("allOf beside anyOf")
            return self.node(merged, depth)
        if all_of is not None:
            if "allOf" not in self.keep or not isinstance(all_of, list):
                raise NotRepresentable("allOf")
            out["allOf"] = [self.node(v, depth + 1) for v in all_of]
        literal = False
        if "enum" in node:
            enum = node.pop("enum")
            if not isinstance(enum, list) or not enum:
                raise NotRepresentable("an empty enum")
            out["enum"] = enum
            literal = True
        if "const" in node:
            out["const"] = node.pop("const")
            literal = True
        any_of = node.pop("anyOf", None)
        if any_of is not None:
            if not isinstance(any_of, list) or not any_of:
                raise NotRepresentable("an empty anyOf")
            out["anyOf"] = [self.node(v, depth + 1) for v in any_of]
        if kind is not None:
            if not isinstance(kind, str):
                raise NotRepresentable("a type that is not a string")
            out["type"] = kind
        elif "properties" in node:
            kind = out["type"] = "object"
        elif not (literal or any_of is not None or all_of is not None):
            raise NotRepresentable("a node without a type (Any)")
        for key in ("description", "title"):
            if isinstance(node.get(key), str):
                out[key] = node.pop(key)
        if kind == "object":
            self._object(node, out, depth)
        elif kind == "array":
            self._array(node, out, depth)
        fmt = node.pop("format", None)
        if fmt is not None:
            if fmt in self.formats and "format" in self.keep:
                out["format"] = fmt
            else:
                notes["format"] = fmt
        for key, value in node.items():
            if key in _DROPPED:
                continue
            if key in self.keep and key not in _STRUCTURAL and self._kept(key, value):
                out[key] = value
            else:
                notes[key] = value
        if notes:
            said = ", ".join(f"{k}: {v}" for k, v in notes.items())
            description = out.get("description")
            out["description"] = f"{description}\n\n{{{said}}}" if description else f"{{{said}}}"
        return out

    def _kept(self, key: str, value: Any) -> bool:
        # Anthropic takes minItems of 0 or 1 only.
        return not (key == "minItems" and self.dialect == "anthropic" and value not in (0, 1))

    def _object(self, node: dict[str, Any], out: dict[str, Any], depth: int) -> None:
        properties = node.pop("properties", None)
        extra = node.pop("additionalProperties", None)
        if extra not in (None, False):
            raise NotRepresentable("an object with free-form keys (additionalProperties)")
        if properties is None:
            raise NotRepresentable("an object without properties (a free-form dict)")
        if not isinstance(properties, dict):
            raise NotRepresentable("properties that are not an object")
        for key in ("patternProperties", "propertyNames", "unevaluatedProperties"):
            if node.pop(key, None) not in (None, False):
                raise NotRepresentable(f"an object with {key}")
        self.properties += len(properties)
        if self.strict and self.properties > OPENAI_MAX_PROPERTIES:
            raise NotRepresentable(f"more than {OPENAI_MAX_PROPERTIES} properties")
        required = node.pop("required", None) or []
        if not isinstance(required, list):
            raise NotRepresentable("required that is not a list")
        out["properties"] = {k: self.node(v, depth + 1) for k, v in properties.items()}
        if self.strict:
            for key, value in properties.items():
                if key not in required and not accepts_null(value, self.defs):
                    raise NotRepresentable(f"the optional property {key!r} does not accept null")
            out["required"] = list(properties)
        elif required:
            out["required"] = list(required)
        out["additionalProperties"] = False

    def _array(self, node: dict[str, Any], out: dict[str, Any], depth: int) -> None:
        if node.pop("prefixItems", None) is not None:
            raise NotRepresentable("a tuple (prefixItems)")
        items = node.pop("items", None)
        if not isinstance(items, dict):
            raise NotRepresentable("an array without an items schema")
        out["items"] = self.node(items, depth + 1)


class FormatCache:
    """The wire form of each :class:`~fanloop.providers.OutputFormat`, made once.

    An agent sends the same ``OutputFormat`` object with every request; this keeps the
    transformed schema per object (at most ``size`` of them).
    """

    __slots__ = ("_build", "_items", "_size")

    def __init__(self, build: Callable[[Any], Any], size: int = 64) -> None:
        self._build = build
        self._items: dict[int, tuple[Any, Any]] = {}
        self._size = size

    def get(self, output: Any) -> Any:
        """The wire form of ``output`` (built on first use)."""
        hit = self._items.get(id(output))
        if hit is not None and hit[0] is output:
            return hit[1]
        value = self._build(output)
        if len(self._items) >= self._size:
            self._items.clear()
        self._items[id(output)] = (output, value)
        return value
