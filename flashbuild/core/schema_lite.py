"""A JSON Schema (2020-12) validator for the keywords manifest.schema.json uses, in the standard
library only, so that the standalone verifier (verifier.py) and `invoke verify` read a manifest
with the same code and give the same answer.

`Validator(schema)` refuses a schema that uses any other keyword (a schema change that needs one
fails its tests, tests/test_standalone_verify.py, instead of being checked loosely);
`first_problem(instance)` is (path, message) of the first violation in document order, or None.
Semantics as jsonschema's: `pattern` searches (unanchored unless the pattern anchors), integers
include floats with no fraction, booleans are neither integers nor numbers, and `const` / `enum`
compare as JSON values (true is not 1).
"""

from __future__ import annotations

import math
import re

_ANNOTATIONS = {"$schema", "title", "description", "$defs"}
_KEYWORDS = {"type", "$ref", "required", "properties", "additionalProperties", "items", "pattern", "const", "enum",
             "minItems", "minLength", "minProperties", "propertyNames", "minimum", "maximum", "if", "then", "else"}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and math.isfinite(v) and v.is_integer()),
}

Problem = tuple[list, str]


def _equal(a, b) -> bool:
    """JSON equality: booleans apart from numbers, containers element by element."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if _TYPES["number"](a) and _TYPES["number"](b):
        return a == b
    return type(a) is type(b) and a == b


class Validator:
    def __init__(self, schema: dict):
        self.root = schema
        self._check_keywords(schema, "#")

    def _check_keywords(self, schema, where: str) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise ValueError(f"{where}: a schema is an object or a boolean")
        unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
        if unknown:
            raise ValueError(f"{where}: schema_lite does not implement {sorted(unknown)}")
        for key in ("items", "additionalProperties", "propertyNames", "if", "then", "else"):
            if key in schema:
                self._check_keywords(schema[key], f"{where}/{key}")
        for key in ("properties", "$defs"):
            for name, sub in schema.get(key, {}).items():
                self._check_keywords(sub, f"{where}/{key}/{name}")
        if "$ref" in schema:
            self._resolve(schema["$ref"])

    def _resolve(self, ref: str):
        if not ref.startswith("#/"):
            raise ValueError(f"$ref {ref!r}: only references inside the schema are implemented")
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part]
        return node

    def first_problem(self, instance) -> Problem | None:
        return self._check(instance, self.root, [])

    def _check(self, value, schema, path: list) -> Problem | None:
        if schema is True:
            return None
        if schema is False:
            return path, f"{value!r} is not allowed here"
        if "$ref" in schema and (problem := self._check(value, self._resolve(schema["$ref"]), path)):
            return problem
        if "type" in schema and not _TYPES[schema["type"]](value):
            return path, f"{value!r} is not of type {schema['type']!r}"
        if "const" in schema and not _equal(value, schema["const"]):
            return path, f"{schema['const']!r} was expected"
        if "enum" in schema and not any(_equal(value, option) for option in schema["enum"]):
            return path, f"{value!r} is not one of {schema['enum']!r}"
        if isinstance(value, str):
            if "minLength" in schema and len(value) < schema["minLength"]:
                return path, f"{value!r} is shorter than {schema['minLength']}"
            if "pattern" in schema and not re.search(schema["pattern"], value):
                return path, f"{value!r} does not match {schema['pattern']!r}"
        if _TYPES["number"](value):
            if "minimum" in schema and value < schema["minimum"]:
                return path, f"{value!r} is less than the minimum of {schema['minimum']!r}"
            if "maximum" in schema and value > schema["maximum"]:
                return path, f"{value!r} is greater than the maximum of {schema['maximum']!r}"
        if isinstance(value, list):
            if "minItems" in schema and len(value) < schema["minItems"]:
                return path, f"{value!r} should have at least {schema['minItems']} items"
            for index, item in enumerate(value):
                if "items" in schema and (problem := self._check(item, schema["items"], path + [index])):
                    return problem
        if isinstance(value, dict) and (problem := self._check_object(value, schema, path)):
            return problem
        if "if" in schema and self._check(value, schema["if"], path) is None:
            if "then" in schema:
                return self._check(value, schema["then"], path)
        elif "if" in schema and "else" in schema:
            return self._check(value, schema["else"], path)
        return None

    def _check_object(self, value: dict, schema, path: list) -> Problem | None:
        for name in schema.get("required", []):
            if name not in value:
                return path, f"{name!r} is a required property"
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            return path, f"{value!r} should have at least {schema['minProperties']} properties"
        properties = schema.get("properties", {})
        for name, item in value.items():
            if "propertyNames" in schema and (problem := self._check(name, schema["propertyNames"], path)):
                return problem
            if name in properties:
                sub = properties[name]
            elif "additionalProperties" in schema:
                sub = schema["additionalProperties"]
                if sub is False:
                    return path, f"additional property {name!r} is not allowed"
            else:
                continue
            if problem := self._check(item, sub, path + [name]):
                return problem
        return None
