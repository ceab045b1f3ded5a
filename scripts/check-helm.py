#!/usr/bin/env python3
"""Checks of the Helm chart deploy/helm/mcp-edge, with Helm's own Go SDK (PyPI helm-python-sdk,
which loads Helm 4's library: no helm binary). Run by scripts/check-ops.sh from the venv it
installs; each subcommand exits non-zero on a failure and says why.

  check-helm.py lint CHART [VALUES.yaml ...]
      helm lint with the default values and with each values file: no warning, no error.
  check-helm.py render CHART VALUES.yaml|- OUT [--name N] [--namespace NS] [--with MANIFEST]
      values.schema.json, then helm template: OUT gets every rendered object (plus MANIFEST's),
      OUT.core.yaml the same without custom resources (for kubernetes-validate). Fails on a
      Secret, and when the objects disagree with the mcp-edge.toml they carry (ports, names,
      mounts).
  check-helm.py compare RENDER.yaml KUSTOMIZE.yaml
      the chart's render and a kustomize build describe the same objects: kinds, names and
      every field, the Helm/instance labels, the config checksum and the image tag aside, the
      ConfigMaps' mcp-edge.toml compared as parsed TOML.
  check-helm.py values-table CHART
      README.md's values table documents every key of values.yaml, no other, with its default.
  check-helm.py schema-docs CHART docs/configuration.md [--write]
      the schema's mcp-edge.toml tables have exactly the keys docs/configuration.md lists
      (less the ones the chart writes itself); --write rewrites them from the docs first.
  check-helm.py package CHART DEST Cargo.toml
      appVersion = the crate's version; helm package into DEST; the archive loads, lints and
      renders as the directory does.
"""
import json
import os
import re
import sys
import tomllib

import yaml

import helm_python as helm

CRD_GROUPS = tuple(os.environ.get("CRD_GROUPS", "monitoring.coreos.com/ cert-manager.io/").split())
HELM_LABELS = {"helm.sh/chart", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by",
               "app.kubernetes.io/version"}


class Dumper(yaml.SafeDumper):
    """Multi-line strings (mcp-edge.toml) as literal blocks, as the templates write them."""


Dumper.add_representer(str, lambda d, s: d.represent_scalar(
    "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def die(msg):
    print(msg)
    sys.exit(1)


def load_values(path):
    """A values file as Helm parses it (the -f input)."""
    if path in (None, "-"):
        return None
    with open(path) as fh:
        return helm.values_from_yaml(fh.read())


def load_docs(path):
    with open(path) as fh:
        return [d for d in yaml.safe_load_all(fh) if d]


# ---- lint ------------------------------------------------------------------------------------

SEVERITY = {0: "UNKNOWN", 1: "INFO", 2: "WARNING", 3: "ERROR"}


def cmd_lint(chart, *values_files):
    bad = 0
    for vf in (None,) + values_files:
        report = helm.lint(chart, values=load_values(vf))
        label = vf or "default values"
        worst = max((m["severity"] for m in report["messages"]), default=0)
        for m in report["messages"]:
            print(f"  [{SEVERITY.get(m['severity'], m['severity'])}] {m['path']}: {m['error'].strip()}")
        for e in report.get("errors") or []:
            if not any(e.strip() == m["error"].strip() for m in report["messages"]):
                print(f"  [ERROR] {e.strip()}")
        if worst >= 2 or report.get("errors"):
            bad += 1
            print(f"helm lint {chart} ({label}): {SEVERITY.get(worst)}")
        else:
            print(f"helm lint {chart} ({label}): {report['total_charts_linted']} chart linted, "
                  f"no warning or error ({len(report['messages'])} info)")
    sys.exit(1 if bad else 0)


# ---- render ----------------------------------------------------------------------------------

def render(chart_path, values, name, namespace):
    with helm.Chart.load(chart_path) as chart:
        # Helm validates against values.schema.json while rendering too; this says it first.
        chart.validate_schema(values)
        rendered = chart.render(values=values, name=name, namespace=namespace, is_install=True)
    docs = []
    for template in sorted(rendered):
        if not template.endswith((".yaml", ".yml")):
            continue
        for d in yaml.safe_load_all(rendered[template]):
            if d:
                docs.append((template, d))
    return docs


def toml_of(docs, cm_name):
    for d in docs:
        if d.get("kind") == "ConfigMap" and d["metadata"]["name"] == cm_name:
            return tomllib.loads((d.get("data") or {})["mcp-edge.toml"])
    return None


def consistency(docs):
    """The objects agree with the mcp-edge.toml they carry; returns what was checked."""
    deps = [d for d in docs if d["kind"] == "Deployment"
            and any(c["name"] == "mcp-edge" for c in d["spec"]["template"]["spec"]["containers"])]
    if len(deps) != 1:
        die(f"expected one mcp-edge Deployment, the render has {len(deps)}")
    dep = deps[0]
    pod = dep["spec"]["template"]["spec"]
    c = next(c for c in pod["containers"] if c["name"] == "mcp-edge")
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"].rstrip("/"): m["name"] for m in c["volumeMounts"]}
    cm_name = vols["config"]["configMap"]["name"]
    config = toml_of(docs, cm_name)
    if config is None:
        die(f"the Deployment mounts ConfigMap/{cm_name}, which the render does not carry")
    ports = {p["containerPort"]: p["name"] for p in c["ports"]}
    svc = next((d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == dep["metadata"]["name"]), None)
    if svc is None:
        die(f"no Service {dep['metadata']['name']}")
    targets = {p["targetPort"] for p in svc["spec"]["ports"]}
    for l in config.get("listeners", []):
        port = int(l["address"].rsplit(":", 1)[1])
        if port not in ports:
            die(f"listener {l['address']}: no container port {port} ({sorted(ports)})")
        if ports[port] not in targets:
            die(f"listener {l['address']}: no Service port targets {ports[port]}")
        for cert in (l.get("tls") or {}).get("certificates", []):
            for f in (cert["cert"], cert["key"]):
                if os.path.dirname(f) not in mounts:
                    die(f"listener {l['address']}: {f} is in no mounted volume")
    admin = int(config["metrics"]["address"].rsplit(":", 1)[1])
    if ports.get(admin) != "admin":
        die(f"[metrics] address {config['metrics']['address']}: not the container port admin")
    fleet = config.get("fleet") or {}
    host, hport = fleet["dns"].rsplit(":", 1)
    peers = next((d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == host), None)
    if peers is None or peers["spec"].get("clusterIP") != "None":
        die(f"[fleet] dns {fleet['dns']}: no headless Service {host}")
    if int(hport) not in {p["port"] for p in peers["spec"]["ports"]} or ports.get(int(hport)) != "handoff":
        die(f"[fleet] dns {fleet['dns']}: not the peers Service's hand-off port")
    keys = config["sessions"]["keys_file"]
    if mounts.get(os.path.dirname(keys)) != "session-keys":
        die(f"[sessions] keys_file {keys}: not in the session-keys mount")
    pw = (config.get("rate_limits") or {}).get("redis_password_file")
    if pw and os.path.dirname(pw) not in mounts:
        die(f"[rate_limits] redis_password_file {pw}: in no mounted volume")
    return (f"ConfigMap/{cm_name}: listeners {sorted(int(l['address'].rsplit(':', 1)[1]) for l in config['listeners'])} "
            f"= container and Service ports, admin {admin}, [fleet] {fleet['dns']} = Service/{host}, "
            f"key ring in Secret {vols['session-keys']['secret']['secretName']}")


def cmd_render(chart, values_file, out, *opts):
    name, namespace, extra = "mcp-edge", "default", None
    it = iter(opts)
    for o in it:
        if o == "--name":
            name = next(it)
        elif o == "--namespace":
            namespace = next(it)
        elif o == "--with":
            extra = next(it)
        else:
            die(f"unknown option {o}")
    try:
        docs = render(chart, load_values(values_file), name, namespace)
    except helm.HelmError as e:
        die(f"helm template {chart} -f {values_file}: {type(e).__name__}: {e}")
    if extra:
        docs += [(extra, d) for d in load_docs(extra)]
    objs = [d for _, d in docs]
    for o in objs:
        if not (o.get("apiVersion") and o.get("kind") and (o.get("metadata") or {}).get("name")):
            die(f"an object without apiVersion, kind or name: {o}")
    secrets = [o["metadata"]["name"] for o in objs if o["kind"] == "Secret"]
    if secrets:
        die(f"renders Secret(s) {secrets}: the chart never creates key material")
    with open(out, "w") as fh:
        for src, d in docs:
            fh.write(f"---\n# Source: {src}\n")
            yaml.dump(d, fh, Dumper=Dumper, sort_keys=False)
    with open(out + ".core.yaml", "w") as fh:
        yaml.dump_all([o for o in objs if not str(o["apiVersion"]).startswith(CRD_GROUPS)], fh, Dumper=Dumper, sort_keys=False)
    summary = consistency(objs)
    kinds = {}
    for o in objs:
        kinds[o["kind"]] = kinds.get(o["kind"], 0) + 1
    print(f"{len(objs)} objects ({', '.join(f'{k} {n}' for k, n in kinds.items())}): "
          + ", ".join(f"{o['kind']}/{o['metadata']['name']}" for o in objs))
    print(summary)


# ---- compare ---------------------------------------------------------------------------------

def normalize(v, key=None):
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in ("labels", "matchLabels") or (k == "selector" and isinstance(x, dict)
                                                  and all(isinstance(s, str) for s in x.values())):
                x = {a: b for a, b in x.items() if a not in HELM_LABELS}
            if k == "annotations":
                x = {a: b for a, b in x.items() if a != "checksum/config"}
                if not x:
                    continue
            if k == "image" and isinstance(x, str):
                x = x.rsplit(":", 1)[0] if ":" in x.rsplit("/", 1)[-1] else x
            if k == "data" and isinstance(x, dict):
                x = {a: (tomllib.loads(b) if a.endswith(".toml") else b) for a, b in x.items()}
            out[k] = normalize(x, k)
        return out
    if isinstance(v, list):
        items = [normalize(x) for x in v]
        if items and all(isinstance(x, dict) and "name" in x for x in items):
            items.sort(key=lambda x: str(x["name"]))
        return items
    return v


def diff(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                yield f"{path}.{k}: only in the kustomize build: {json.dumps(b[k])[:200]}"
            elif k not in b:
                yield f"{path}.{k}: only in the chart: {json.dumps(a[k])[:200]}"
            else:
                yield from diff(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            yield from diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: chart {json.dumps(a)[:200]} != kustomize {json.dumps(b)[:200]}"


def cmd_compare(chart_out, kustomize_out):
    a = {(d["kind"], d["metadata"]["name"]): normalize(d) for d in load_docs(chart_out)}
    b = {(d["kind"], d["metadata"]["name"]): normalize(d) for d in load_docs(kustomize_out)}
    problems = []
    for k in sorted(set(a) ^ set(b)):
        problems.append(f"{k[0]}/{k[1]}: only in the {'chart' if k in a else 'kustomize build'}")
    for k in sorted(set(a) & set(b)):
        problems += [f"{k[0]}/{k[1]}{p}" for p in diff(a[k], b[k])]
    if problems:
        print("\n".join(problems))
        die(f"{chart_out} and {kustomize_out} differ in {len(problems)} place(s)")
    for (kind, name), o in sorted(a.items()):
        spec = o.get("spec") or {}
        what = "every field"
        if kind == "Deployment":
            pod = spec["template"]["spec"]
            c = pod["containers"][0]
            probes = [p for p in ("startupProbe", "livenessProbe", "readinessProbe") if p in c]
            what = (f"ports {[(p['name'], p['containerPort']) for p in c.get('ports', [])]}, {', '.join(probes)}, "
                    + ("preStop, " if "lifecycle" in c else "") + 
                    f"resources {c.get('resources')}, securityContext (pod and container), env {[e['name'] for e in c.get('env', [])]}, "
                    f"volumes {[v['name'] for v in pod.get('volumes', [])]}")
        elif kind == "Service":
            what = f"ports {[(p.get('name'), p['port'], p.get('targetPort')) for p in spec['ports']]}" + (
                ", headless" if spec.get("clusterIP") == "None" else "")
        elif kind == "ConfigMap":
            what = "mcp-edge.toml as parsed TOML" if any(k.endswith(".toml") for k in o.get("data", {})) else what
        print(f"  {kind}/{name}: {what}")
    print(f"{len(a)} objects, the same in both (Helm labels, checksum/config and the image tag aside)")


# ---- values table ----------------------------------------------------------------------------

def leaves(v, prefix=""):
    """Every key path of values.yaml whose value is a scalar, a list or an empty map."""
    if isinstance(v, dict) and v:
        for k, x in v.items():
            yield from leaves(x, f"{prefix}.{k}" if prefix else k)
    else:
        yield prefix, v


def get_path(values, path):
    v = values
    for part in path.split("."):
        if not isinstance(v, dict) or part not in v:
            raise KeyError(path)
        v = v[part]
    return v


def cmd_values_table(chart):
    with open(os.path.join(chart, "values.yaml")) as fh:
        values = yaml.safe_load(fh)
    with open(os.path.join(chart, "README.md")) as fh:
        readme = fh.read()
    rows = {}
    problems = []
    for line in readme.splitlines():
        m = re.match(r"^\| `([A-Za-z0-9_.]+)` \| (.*?) \| (.*) \|$", line)
        if m:
            if m.group(1) in rows:
                problems.append(f"README.md: `{m.group(1)}` documented twice")
            rows[m.group(1)] = m.group(2).strip()
    if not rows:
        die("README.md has no values table (rows `| `key` | `default` | description |`)")
    for key, cell in rows.items():
        try:
            value = get_path(values, key)
        except KeyError:
            problems.append(f"README.md documents `{key}`, which values.yaml does not have")
            continue
        complex_ = isinstance(value, (list, dict)) and any(isinstance(x, (dict, list)) for x in
                                                          (value.values() if isinstance(value, dict) else value))
        want = "`" + json.dumps(value, separators=(", ", ": ")) + "`"
        if cell != want and not (complex_ and cell == "see values.yaml"):
            problems.append(f"README.md `{key}`: default {cell}, values.yaml has {want}"
                            + (" (or: see values.yaml)" if complex_ else ""))
        for other in rows:
            if other.startswith(key + "."):
                problems.append(f"README.md documents `{other}` inside `{key}`, which it also documents whole")
    for path, value in leaves(values):
        if not any(path == r or path.startswith(r + ".") for r in rows):
            problems.append(f"values.yaml `{path}` is not in README.md's table "
                            f"(| `{path}` | `{json.dumps(value, separators=(', ', ': '))}` | … |)")
    if problems:
        print("\n".join(problems))
        die(f"README.md's values table and values.yaml differ in {len(problems)} place(s)")
    print(f"README.md documents {len(rows)} keys covering all {sum(1 for _ in leaves(values))} leaves of values.yaml, "
          f"each with the default values.yaml gives it")


# ---- schema against docs/configuration.md ----------------------------------------------------

# Each table of docs/configuration.md: where values.schema.json describes it, and which of its
# keys the chart writes itself (not settable in values).
DOC_TABLES = {
    "server": ("config.server", set()),
    "listeners": ("listeners[].settings", {"address", "tls"}),
    "listeners.tls": (None, {"certificates", "watch_ms"}),
    "listeners.tls.certificates": (None, {"cert", "key"}),
    "metrics": ("config.metrics", {"address"}),
    "limits": ("config.limits", set()),
    "timeouts": ("config.timeouts", set()),
    "forwarding": ("config.forwarding", set()),
    "access_log": ("config.access_log", set()),
    "tracing": ("tracing.settings", {"endpoint"}),
    "pools": ("config.pools[]", set()),
    "pools.health": ("config.pools[].health", set()),
    "pools.tls": ("config.pools[].tls", set()),
    "pools.credential": ("config.pools[].credential", set()),
    "routes": ("config.routes[]", set()),
    "routes.policy": ("config.routes[].policy[]", set()),
    "routes.rate_limit": ("config.routes[].rate_limit", set()),
    "routes.scopes": ("config.routes[].scopes[]", set()),
    "rate_limits": ("redis.settings", {"redis", "redis_password_file"}),
    "fleet": ("config.fleet", {"dns", "peers", "handoff_listen", "advertise"}),
    "passthrough": ("config.passthrough[]", set()),
    "sessions": ("config.sessions", {"keys_file", "keys_env"}),
    "identity": ("config.identity", set()),
    "identity.jwt": ("config.identity.jwt", set()),
    "assertions": ("config.assertions", set()),
}


def schema_at(schema, path):
    s = schema
    for part in path.split("."):
        arr = part.endswith("[]")
        s = s["properties"][part[:-2] if arr else part]
        if arr:
            s = s["items"]
    return s


def cmd_schema_docs(chart, docs_path, *opts):
    """With --write, first rewrites the mapped tables' properties from the docs (the keys in the
    docs' order, each keeping its subschema, a new one {}): the fix after the edge gains a key."""
    schema_path = os.path.join(chart, "values.schema.json")
    with open(schema_path) as fh:
        schema = json.load(fh)
    tables, cur = {}, None
    with open(docs_path) as fh:
        for line in fh:
            m = re.match(r"^### `\[\[?([a-z_.]+)\]\]?`", line)
            if m:
                cur = tables.setdefault(m.group(1), [])
                continue
            if line.startswith("## "):
                cur = None
            m = re.match(r"^\| `([a-z0-9_]+)` \|", line)
            if cur is not None and m:
                cur.append(m.group(1))
    if "--write" in opts:
        for t, (path, owned) in DOC_TABLES.items():
            if path is None or t not in tables:
                continue
            sub = schema_at(schema, path)
            old = sub.get("properties", {})
            sub["properties"] = {k: old.get(k, {}) for k in tables[t] if k not in owned}
        with open(schema_path, "w") as fh:
            json.dump(schema, fh, indent=2, ensure_ascii=False)
            fh.write("\n")
        print(f"{schema_path}: rewritten from {docs_path}")
    problems = []
    for t in sorted(set(tables) ^ set(DOC_TABLES)):
        problems.append(f"table [{t}]: " + ("in docs/configuration.md, not mapped in check-helm.py DOC_TABLES"
                                           if t in tables else "mapped in check-helm.py, gone from docs/configuration.md"))
    for t in sorted(set(tables) & set(DOC_TABLES)):
        path, owned = DOC_TABLES[t]
        keys = set(tables[t])
        if owned - keys:
            problems.append(f"[{t}]: the chart writes {sorted(owned - keys)}, which docs/configuration.md no longer lists")
        if path is None:
            if keys - owned:
                problems.append(f"[{t}]: {sorted(keys - owned)} not settable through the chart")
            continue
        s = schema_at(schema, path)
        if s.get("additionalProperties") is not False:
            problems.append(f"{path}: additionalProperties must be false")
        props = set(s.get("properties", {}))
        if props != keys - owned:
            problems.append(f"{path} ([{t}]): schema {sorted(props)}, docs less the chart's own {sorted(keys - owned)}")
    mapped = {p.split(".")[1].rstrip("[]") for p, _ in DOC_TABLES.values() if p and p.startswith("config.")}
    if set(schema["properties"]["config"]["properties"]) != mapped:
        problems.append(f"config: the schema's tables {sorted(schema['properties']['config']['properties'])}, mapped {sorted(mapped)}")
    if problems:
        print("\n".join(problems))
        die(f"values.schema.json and docs/configuration.md differ in {len(problems)} place(s); when the edge "
            f"gained or lost a key, rewrite the schema's tables from the docs: {sys.executable} "
            f"scripts/check-helm.py schema-docs {chart} {docs_path} --write")
    print(f"{len(tables)} tables of docs/configuration.md ({sum(len(k) for k in tables.values())} keys): "
          f"each key is in values.schema.json (unknown keys refused) or written by the chart")


# ---- package ---------------------------------------------------------------------------------

def cmd_package(chart, dest, cargo):
    with open(cargo, "rb") as fh:
        crate = tomllib.load(fh)["package"]["version"]
    with helm.Chart.load(chart) as c:
        meta = c.metadata
    if str(meta.get("appVersion")) != crate:
        die(f"{chart}/Chart.yaml appVersion {meta.get('appVersion')!r} != the crate's version {crate!r} ({cargo})")
    os.makedirs(dest, exist_ok=True)
    archive = helm.package(chart, destination=dest)
    with helm.Chart.load(archive) as c:
        packed = c.metadata
    if packed.get("appVersion") != crate or packed.get("version") != meta.get("version"):
        die(f"{archive}: appVersion {packed.get('appVersion')}, version {packed.get('version')}")
    report = helm.lint(archive)
    if any(m["severity"] >= 2 for m in report["messages"]) or report.get("errors"):
        die(f"{archive}: helm lint: {report}")
    if render(archive, None, "mcp-edge", "default") != render(chart, None, "mcp-edge", "default"):
        die(f"{archive} renders differently from {chart}")
    print(f"{archive}: chart {packed['name']} {packed['version']}, appVersion {packed['appVersion']} = "
          f"crate {crate}; {os.path.getsize(archive)} bytes, {helm.digest(archive)}; "
          f"loads, lints and renders as {chart}")


COMMANDS = {"lint": cmd_lint, "render": cmd_render, "compare": cmd_compare,
            "values-table": cmd_values_table, "schema-docs": cmd_schema_docs, "package": cmd_package}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        die(__doc__)
    helm.disable_logging()
    COMMANDS[sys.argv[1]](*sys.argv[2:])
