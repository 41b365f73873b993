#!/usr/bin/python3
"""Checks Kubernetes manifests against the API's own models, offline (docs/operations.md,
"Kubernetes"): every document's apiVersion and kind name a known type, every field is one that
type has (a misspelt key is an error, as `kubectl apply --validate=strict` makes it), every
value has the field's type, and the required fields and enum values hold (the models' own
client-side checks). The models are Debian's python3-kubernetes (generated from the API's
OpenAPI description); run it with Debian's /usr/bin/python3.

    tools/check_manifests.py FILE...   (- for stdin; multi-document YAML, as `kubectl kustomize` prints)

Exit code 0 when every document holds, 1 with one line per problem, 2 when it cannot run."""
import re
import sys

try:
    import yaml
    from kubernetes import client
except ImportError as e:
    sys.exit(f"error: {e}\n  fix: apt-get install python3-kubernetes, and run this with /usr/bin/python3")

SCALARS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
           "datetime": (str,), "date": (str,), "object": (object,)}
# Resource quantities may be written as numbers (nvidia.com/gpu: 8); the API parses both.
QUANTITY_FIELDS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}


def model_of(doc):
    api, kind = doc.get("apiVersion", ""), doc.get("kind", "")
    version = api.split("/")[-1]
    name = version[:1].upper() + version[1:] + kind
    cls = getattr(client, name, None)
    return name if cls is not None and hasattr(cls, "openapi_types") else None


def check_type(value, typ, path, problems, owner=None):
    if value is None:
        return
    if typ.startswith("list["):
        if not isinstance(value, list):
            return problems.append(f"{path}: a list was expected")
        for i, item in enumerate(value):
            check_type(item, typ[5:-1], f"{path}[{i}]", problems)
    elif typ.startswith("dict("):
        if not isinstance(value, dict):
            return problems.append(f"{path}: a map was expected")
        inner = re.match(r"dict\(str, (.*)\)$", typ).group(1)
        for key, item in value.items():
            if owner in QUANTITY_FIELDS and isinstance(item, (int, float)):
                continue
            check_type(item, inner, f"{path}.{key}", problems)
    elif typ in SCALARS:
        if typ == "object":
            ok = True
        elif typ == "bool":
            ok = isinstance(value, bool)
        else:  # YAML's true is no number or string
            ok = isinstance(value, SCALARS[typ]) and not isinstance(value, bool)
        if not ok:
            problems.append(f"{path}: {value!r} is not a {typ}")
    else:
        check_model(value, typ, path, problems)


def check_model(value, name, path, problems):
    cls = getattr(client, name)
    if not isinstance(value, dict):
        return problems.append(f"{path}: a map was expected ({name})")
    by_json = {j: a for a, j in cls.attribute_map.items()}
    known = {}
    for key, item in value.items():
        if key not in by_json:
            problems.append(f"{path}.{key}: {name} has no field '{key}'")
            continue
        attr = by_json[key]
        known[attr] = item
        check_type(item, cls.openapi_types[attr], f"{path}.{key}", problems, (name, attr))
    try:  # required fields and enum values, as the model's setters check them
        cls(local_vars_configuration=client.Configuration(), **known)
    except (ValueError, TypeError) as e:
        problems.append(f"{path}: {name}: {e}")


def check_file(path, problems):
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    count = 0
    for i, doc in enumerate(yaml.safe_load_all(text)):
        if doc is None:
            continue
        count += 1
        where = f"{path}#{i + 1} ({doc.get('kind', '?')} {doc.get('metadata', {}).get('name', '?')})"
        name = model_of(doc)
        if name is None:
            problems.append(f"{where}: unknown apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')}")
            continue
        check_model(doc, name, where, problems)
    return count


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) >= 2 else 2
    problems, documents = [], 0
    for path in argv[1:]:
        try:
            documents += check_file(path, problems)
        except (OSError, yaml.YAMLError) as e:
            problems.append(f"{path}: {e}")
    for p in problems:
        print(p)
    print(f"check_manifests: {documents} documents, {len(problems)} problems")
    return 1 if problems or documents == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
