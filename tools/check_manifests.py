#!/usr/bin/python3
"""Checks Kubernetes manifests against the API's own models, offline (docs/operations.md,
"Kubernetes"): every document's apiVersion (group and version) serves its kind, every field is
one that type has (a misspelt key is an error), every value has the field's type (int-or-string
fields take an int or a string, resource quantities parse), the required fields hold (the
models' own client-side checks), and a workload is consistent: its selector matches its
template's labels, every volume mount names a volume, and on the host network a container's
hostPort equals its containerPort. The models are Debian's python3-kubernetes (generated from
the API's OpenAPI description, release 22); run it with Debian's /usr/bin/python3. It does not
know every rule the API server enforces (names' syntax, enum values the models leave open).

    tools/check_manifests.py FILE...   (- for stdin; multi-document YAML, as `kubectl kustomize` prints)

Exit code 0 when every document holds, 1 with one line per problem, 2 when it cannot run."""
import re
import sys

try:
    import yaml
    from kubernetes import client, utils
except ImportError as e:
    sys.exit(f"error: {e}\n  fix: apt-get install python3-kubernetes, and run this with /usr/bin/python3")

# "object" in these models is an int-or-string field (a port, maxUnavailable) in the kinds
# workloads use.
SCALARS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,),
           "datetime": (str,), "date": (str,), "object": (int, str)}
# Resource quantities, written as strings or numbers (nvidia.com/gpu: 8).
QUANTITY_FIELDS = {("V1ResourceRequirements", "limits"), ("V1ResourceRequirements", "requests")}


# Enum values the API server checks and these models leave open (the fields the manifests use).
ENUMS = {("V1PodSpec", "restart_policy"): {"Always", "OnFailure", "Never"},
         ("V1PodSpec", "dns_policy"): {"ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"},
         ("V1Container", "image_pull_policy"): {"Always", "IfNotPresent", "Never"},
         ("V1ContainerPort", "protocol"): {"TCP", "UDP", "SCTP"},
         ("V1ServicePort", "protocol"): {"TCP", "UDP", "SCTP"},
         ("V1Toleration", "operator"): {"Exists", "Equal"},
         ("V1Toleration", "effect"): {"NoSchedule", "PreferNoSchedule", "NoExecute"},
         ("V1HostPathVolumeSource", "type"): {"", "DirectoryOrCreate", "Directory", "FileOrCreate",
                                              "File", "Socket", "CharDevice", "BlockDevice"}}
# metadata.name: a DNS subdomain (RFC 1123), as most kinds want it.
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def snake(name):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def model_of(doc):
    """The model class's name, when the document's group and version serve its kind."""
    api, kind = str(doc.get("apiVersion", "")), str(doc.get("kind", ""))
    group, _, version = api.partition("/")
    if not version:
        group, version = "core", group
    group = "".join(w.capitalize() for w in group.replace(".k8s.io", "").split("."))
    served = getattr(client, f"{group}{version.capitalize()}Api", None)
    if served is None or not any(hasattr(served, f"create{n}_{snake(kind)}") for n in ("", "_namespaced")):
        return None
    name = version[:1].upper() + version[1:] + kind
    cls = getattr(client, name, None)
    return name if cls is not None and hasattr(cls, "openapi_types") else None


def check_quantity(value, path, problems):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return problems.append(f"{path}: {value!r} is not a quantity")
    try:
        utils.parse_quantity(value)
    except ValueError as e:
        problems.append(f"{path}: {value!r} is not a quantity ({e})")


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
            if owner in QUANTITY_FIELDS:
                check_quantity(item, f"{path}.{key}", problems)
            else:
                check_type(item, inner, f"{path}.{key}", problems)
    elif typ in SCALARS:
        if typ == "bool":
            ok = isinstance(value, bool)
        else:  # YAML's true is no number or string
            ok = isinstance(value, SCALARS[typ]) and not isinstance(value, bool)
        if not ok:
            what = "an int or a string" if typ == "object" else f"a {typ}"
            problems.append(f"{path}: {value!r} is not {what}")
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
        allowed = ENUMS.get((name, attr))
        if allowed is not None and item not in allowed:
            problems.append(f"{path}.{key}: {item!r} is not one of {sorted(allowed)}")
    try:  # required fields and enum values, as the model's setters check them
        cls(local_vars_configuration=client.Configuration(), **known)
    except (ValueError, TypeError) as e:
        problems.append(f"{path}: {name}: {e}")


def check_workload(doc, where, problems):
    """What the API server checks across fields of a workload (DaemonSet, StatefulSet, ...)."""
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    template = spec.get("template") if isinstance(spec.get("template"), dict) else None
    if template is None:
        return
    wanted = (spec.get("selector") or {}).get("matchLabels") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        problems.append(f"{where}: spec.selector.matchLabels {wanted} do not match the template's labels {labels}")
    pod = template.get("spec") or {}
    volumes = {v.get("name") for v in pod.get("volumes") or [] if isinstance(v, dict)}
    volumes |= {c.get("metadata", {}).get("name") for c in spec.get("volumeClaimTemplates") or []}
    for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        for m in c.get("volumeMounts") or []:
            if m.get("name") not in volumes:
                problems.append(f"{where}: container {c.get('name')} mounts '{m.get('name')}', which is no volume")
        for p in c.get("ports") or [] if pod.get("hostNetwork") else []:
            if "hostPort" in p and p["hostPort"] != p.get("containerPort"):
                problems.append(f"{where}: container {c.get('name')}: on the host network hostPort "
                                f"{p['hostPort']} must equal containerPort {p.get('containerPort')}")


def check_file(path, problems):
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    count = 0
    for i, doc in enumerate(yaml.safe_load_all(text)):
        if doc is None:
            continue
        count += 1
        if not isinstance(doc, dict):
            problems.append(f"{path}#{i + 1}: not a Kubernetes object (a mapping) but {type(doc).__name__}")
            continue
        where = f"{path}#{i + 1} ({doc.get('kind', '?')} {doc.get('metadata', {}).get('name', '?')})"
        name = model_of(doc)
        if name is None:
            problems.append(f"{where}: unknown apiVersion/kind {doc.get('apiVersion')}/{doc.get('kind')}")
            continue
        check_model(doc, name, where, problems)
        check_workload(doc, where, problems)
        meta_name = (doc.get("metadata") or {}).get("name")
        if not isinstance(meta_name, str) or len(meta_name) > 253 or not NAME.match(meta_name):
            problems.append(f"{where}: metadata.name {meta_name!r} is not a DNS name (lower-case "
                            "letters, digits, '-' and '.')")
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
