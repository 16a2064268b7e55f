#!/usr/bin/python3
"""Validates JSON documents against a sandboxer schema (python3-jsonschema, Draft 2020-12).

    validate_json.py SCHEMA FILE...          each FILE holds one JSON document
    validate_json.py --lines SCHEMA FILE...  each line of each FILE is one document
    validate_json.py --protocol BUNDLE FILE  FILE is a recording of driver protocol traffic
    validate_json.py --invalid SCHEMA FILE...  each FILE must FAIL (the schema is not blind)

Prints every failure (file, path in the document, message); exits 1 if any. A schema the validator
cannot follow (an unresolvable $ref) exits 2: that is neither a pass nor a failure of a document.
Runs with whichever python3 calls it: tests/e2e/test_schemas.sh runs it with Debian's jsonschema
and with one that resolves references through `referencing` (>= 4.18), which is stricter."""
import json
import sys

import jsonschema

failures = 0


def check(what, instance, schema, show=5):
    global failures
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    for error in errors[:show]:
        print(f"{what}: /{'/'.join(map(str, error.absolute_path))}: {error.message}")
    failures += bool(errors)


def by_ref(bundle, name):
    return {"$ref": f"#/$defs/{name}", "$defs": bundle["$defs"]}


def protocol(bundle, path):
    methods = {}
    defs = bundle["$defs"]
    seen = 0
    for number, entry in enumerate(map(json.loads, open(path)), 1):
        message = json.loads(entry["line"])
        where = f"{path}:{number} ({entry['dir']})"
        seen += 1
        if entry["dir"] == "in":
            if "id" in message:
                check(where, message, by_ref(bundle, "request"))
                methods[message["id"]] = message["method"]
                if message["method"] + ".params" in defs:
                    check(where, message["params"], by_ref(bundle, message["method"] + ".params"))
            else:
                check(where, message, by_ref(bundle, message["method"]))
        elif "id" in message:
            check(where, message, by_ref(bundle, "response"))
            method = methods.get(message["id"])
            if "result" in message and f"{method}.result" in defs:
                check(where, message["result"], by_ref(bundle, f"{method}.result"))
        else:
            check(where, message, by_ref(bundle, message["method"]))
    print(f"{path}: {seen} protocol messages checked")


def main():
    global failures
    args = sys.argv[1:]
    mode = args.pop(0) if args[0].startswith("--") else "--documents"
    schema = json.load(open(args[0]))
    jsonschema.Draft202012Validator.check_schema(schema)
    if mode == "--invalid":
        for path in args[1:]:
            before = failures
            check(path, json.load(open(path)), schema, show=0)
            if failures == before:
                print(f"{path}: passed, but it is invalid")
        sys.exit(0 if failures == len(args) - 1 else 1)
    for path in args[1:]:
        if mode == "--protocol":
            protocol(schema, path)
        elif mode == "--lines":
            for number, line in enumerate(open(path), 1):
                check(f"{path}:{number}", json.loads(line), schema)
        else:
            check(path, json.load(open(path)), schema)
    sys.exit(1 if failures else 0)


try:
    main()
except Exception as error:  # the schema, or the validator following it, broke (a $ref to nowhere)
    text = str(error)  # a PointerToNowhere holds the whole schema
    print(f"cannot validate: {type(error).__name__}: {text[:300]}", file=sys.stderr)
    sys.exit(2)
