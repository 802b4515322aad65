#!/usr/bin/env python3
"""Validates JSON documents against pcnn's schemas (docs/schema/*.json).

A small validator of the subset of JSON Schema (2020-12) those schemas use: type, properties,
required, additionalProperties (false or a schema), items, minItems, maxItems, enum, const,
minimum, maximum, exclusiveMinimum, and $ref to "#/$defs/..." or "FILE.json#/$defs/..." in the
same folder. A keyword outside that subset is an error, so a schema cannot silently rely on one
that is not checked. (Debian's python3-jsonschema is not installed here; when it is importable,
--self-test also checks that it agrees.)

  json_schema_check.py SCHEMA_DIR NAME [FILE]   validate FILE (default: stdin) against NAME.json
  json_schema_check.py SCHEMA_DIR --self-test   the validator rejects wrong documents
"""
import json
import os
import sys

ANNOTATIONS = {"$schema", "$id", "title", "description", "$defs"}
KEYWORDS = ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "items",
                          "minItems", "maxItems", "enum", "const", "minimum", "maximum",
                          "exclusiveMinimum", "$ref"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


class Validator:
    def __init__(self, folder):
        self.folder = folder
        self.files = {}

    def load(self, name):
        if name not in self.files:
            with open(os.path.join(self.folder, name)) as f:
                self.files[name] = json.load(f)
        return self.files[name]

    def resolve(self, ref, current):
        file, _, pointer = ref.partition("#")
        file = file or current
        node = self.load(file)
        for part in filter(None, pointer.split("/")):
            node = node[part]
        return node, file

    def check(self, schema, value, where, file, errors):
        unknown = set(schema) - KEYWORDS
        if unknown:
            raise ValueError(f"{file}: keywords outside the checked subset: {sorted(unknown)}")
        if "$ref" in schema:
            target, target_file = self.resolve(schema["$ref"], file)
            self.check(target, value, where, target_file, errors)
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(TYPES[t](value) for t in types):
                errors.append(f"{where}: {json.dumps(value)[:60]} is not of type {types}")
                return
        if "const" in schema and value != schema["const"]:
            errors.append(f"{where}: {value!r} is not {schema['const']!r}")
        if "enum" in schema and value not in schema["enum"]:
            errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
        if TYPES["number"](value):
            if "minimum" in schema and value < schema["minimum"]:
                errors.append(f"{where}: {value} < minimum {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                errors.append(f"{where}: {value} > maximum {schema['maximum']}")
            if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
                errors.append(f"{where}: {value} <= exclusiveMinimum {schema['exclusiveMinimum']}")
        if isinstance(value, dict):
            props = schema.get("properties", {})
            for key in schema.get("required", []):
                if key not in value:
                    errors.append(f"{where}: required key '{key}' is missing")
            for key, v in value.items():
                if key in props:
                    self.check(props[key], v, f"{where}.{key}", file, errors)
                elif schema.get("additionalProperties", True) is False:
                    errors.append(f"{where}: key '{key}' is not in the schema")
                elif isinstance(schema.get("additionalProperties"), dict):
                    self.check(schema["additionalProperties"], v, f"{where}.{key}", file, errors)
        if isinstance(value, list):
            if "minItems" in schema and len(value) < schema["minItems"]:
                errors.append(f"{where}: {len(value)} items < minItems {schema['minItems']}")
            if "maxItems" in schema and len(value) > schema["maxItems"]:
                errors.append(f"{where}: {len(value)} items > maxItems {schema['maxItems']}")
            if "items" in schema:
                for i, v in enumerate(value):
                    self.check(schema["items"], v, f"{where}[{i}]", file, errors)

    def validate(self, name, value):
        errors = []
        self.check(self.load(name + ".json"), value, "$", name + ".json", errors)
        return errors


def self_test(v):
    """Documents that must pass and documents that must fail, one fault each."""
    cloud = {"file": "a.pcd", "points": 2, "skipped_not_finite": 0, "organized": False,
             "width": 2, "height": 1, "coordinate_type": "float32", "origin": [0, 0, 0],
             "float_offsets_exact": True}
    good = {"command": "knn", "exclude_self": False, "references": cloud, "load_ms": 1.5, "k": 1,
            "device": {"backend": "cpu", "threads": 2},
            "search": {"build_index_ms": 1, "search_ms": 2, "total_ms": 3}}
    wrong = {
        "a number as a string": ("k", "1"),
        "a boolean as a string": ("exclude_self", "no"),
        "a vector as a string": ("references", dict(cloud, origin="(0, 0, 0)")),
        "a vector too short": ("references", dict(cloud, origin=[0, 0])),
        "k out of range": ("k", 500),
        "an unknown key": ("extra", 1),
        "a wrong command": ("command", "radius"),
        "an unknown backend": ("device", {"backend": "tpu"}),
        "a negative time": ("load_ms", -1),
        "a boolean for a number": ("k", True),
        "null for a required object": ("search", None),
    }
    failures = []
    if v.validate("knn", good):
        failures.append(f"a good document fails: {v.validate('knn', good)}")
    for what, (key, value) in wrong.items():
        doc = dict(good)
        doc[key] = value
        if not v.validate("knn", doc):
            failures.append(f"{what} passes")
    missing = dict(good)
    del missing["device"]
    if not v.validate("knn", missing):
        failures.append("a missing required key passes")
    err = {"error": {"message": "x", "exit_code": 3, "file": "a.pcd"}}
    if v.validate("error", err):
        failures.append("a good error fails")
    if not v.validate("error", {"error": {"message": "x", "exit_code": "3"}}):
        failures.append("an exit code as a string passes")
    try:
        Validator(v.folder).check({"oneOf": []}, 1, "$", "test", [])
        failures.append("an unchecked keyword is accepted")
    except ValueError:
        pass
    # Every schema loads and uses only the checked subset.
    for name in sorted(os.listdir(v.folder)):
        if name.endswith(".json"):
            def walk(node):
                if isinstance(node, dict):
                    if "type" in node or "$ref" in node or "properties" in node:
                        unknown = set(node) - KEYWORDS
                        if unknown:
                            failures.append(f"{name}: unchecked keywords {sorted(unknown)}")
                    for k, x in node.items():
                        if k not in ("enum", "const", "required"):
                            walk(x)
                elif isinstance(node, list):
                    for x in node:
                        walk(x)
            walk(v.load(name))
    try:
        import jsonschema  # noqa: F401  (cross-check where Debian's package is installed)
        from referencing import Registry, Resource
        registry = Registry().with_resources(
            (n, Resource.from_contents(v.load(n))) for n in os.listdir(v.folder) if n.endswith(".json"))
        checker = jsonschema.Draft202012Validator(v.load("knn.json"), registry=registry)
        if not checker.is_valid(good):
            failures.append("jsonschema rejects the good document")
    except ImportError:
        pass
    for f in failures:
        print("FAIL:", f)
    print(f"validator self-test: {len(wrong) + 5} wrong documents, {len(failures)} failures")
    return 1 if failures else 0


def main():
    folder = sys.argv[1]
    v = Validator(folder)
    if sys.argv[2] == "--self-test":
        return self_test(v)
    name = sys.argv[2]
    text = open(sys.argv[3]).read() if len(sys.argv) > 3 else sys.stdin.read()
    lines = [l for l in text.splitlines() if l.strip()]
    if len(lines) != 1:
        print(f"FAIL: expected one JSON line on stdout, got {len(lines)}")
        return 1
    try:
        doc = json.loads(lines[0])
    except json.JSONDecodeError as e:
        print(f"FAIL: not JSON: {e}")
        return 1
    errors = v.validate(name, doc)
    for e in errors:
        print(f"FAIL ({name}): {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
