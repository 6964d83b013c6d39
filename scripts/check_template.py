#!/usr/bin/env python3
"""Operational checks of the SAM templates that cfn-lint does not make (run by check-template.sh).

What one resource at a time must hold is a CloudFormation Guard rule (stacks/rules.guard,
run by scripts/check_guard.py); what follows spans resources, templates or configurations.

Usage (from the repository root, the workspace whose functions/* the templates deploy):
  check_template.py [--packaged] FILE...
  --packaged: the templates are `make package`'s (target/package/<stack>[.s3].yaml): only
  their functions' code is checked (each binary's zip beside the template, or in S3 at
  parameters CodeBucket and CodeKeyPrefix, and every binary packaged); the rest is the
  stacks', checked without --packaged.
  *.yaml / *.yml: templates to check, each with the stacks it nests from local files
  (`AWS::Serverless::Application` with `Location: stacks/x.yaml`); default: template.yaml.
  A nested stack's resources join its parent's configuration as "<Application>/<Id>", under
  the parameters the parent passes; a stack only nested and without functions
  (stacks/shared/sources.yaml) is checked that way only.
  *.md: the docs (README.md, docs/*.md); default: README.md and docs/*.md.
  DIR: check in each such directory instead (a copy of the templates and docs with the
  workspace linked in: check-template.sh's broken copies), its lines prefixed with it.
Exit status 1 with one line per violation.

A writer stack takes existing resources as parameters or creates them (CloudFormation
Conditions), so each template is checked in the configurations its checks need: its
parameters' defaults, and, for every combination of its switches (parameters with
AllowedValues that a Condition outside tables and IAM reads, or that the stack passes to a
nested stack's switch), all of its optional resources left empty (created) and all given
(existing: the SAMPLES below). Configurations its Rules refuse are skipped. (cfn-lint's
condition scenarios were considered instead: they enumerate every satisfiable combination of
all Conditions and resolve neither Ref nor Fn::Sub, which these checks need.) Each gives
every function its longest timeout and every created queue its shortest visibility timeout.
In each, the resources whose Condition holds are resolved (Ref, Fn::If, Fn::Sub, Fn::Select,
Fn::Split, Fn::Join, Fn::FindInMap) and must keep the guarantees docs/deploy.md lists under
"What the templates guarantee" (workspace binaries and code, policy parameters without
wildcards, an alarm per failure path, created queues' visibility against timeouts, the counter
journal's roll-up, the transaction horizons, the docs' names and runbook entries); each check
function states its own. (A table declared by two templates with one shape, and the journal
table's stream and TTL, are dynamo-provision's: its template_tables refuses a table declared
again otherwise, and its tests read template.yaml.)
"""

import glob
import itertools
import os
import re
import sys
import tomllib
import zipfile

import yaml

# Names the docs may use that are not resources of a template.
DOC_SUFFIXES = ("Table", "Role", "Alarm", "Queue", "QueueRedrive", "StreamFailures",
                "Function", "Stream", "LogGroup")
# Pseudo parameters as a configuration sees them.
PSEUDO = {"AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws",
          "AWS::StackName": "stack", "AWS::URLSuffix": "amazonaws.com"}
# Values for the parameters that name an existing resource (or an optional setting) when a
# configuration gives them. Each must match its parameter's AllowedPattern.
SAMPLES = {
    "StreamArn@Kinesis": "arn:aws:kinesis:eu-west-1:123456789012:stream/existing-stream",
    "StreamArn@DynamoDB": "arn:aws:dynamodb:eu-west-1:123456789012:table/existing-source/stream/"
                          "2026-01-01T00:00:00.000",
    "QueueArn": "arn:aws:sqs:eu-west-1:123456789012:existing-queue",
    "QueueRedriveArn": "arn:aws:sqs:eu-west-1:123456789012:existing-queue-redrive",
    "DeadLetterQueueArn": "arn:aws:sqs:eu-west-1:123456789012:existing-dead-letters",
    "AlarmTopicArn": "arn:aws:sns:eu-west-1:123456789012:oncall",
    "OtelCollectorLayerArn": "arn:aws:lambda:eu-west-1:901920570463:layer:"
                             "aws-otel-collector-arm64-ver-0-117-0:1",
    "AllowedTableArns": "arn:aws:dynamodb:eu-west-1:123456789012:table/existing-accounts,"
                        "arn:aws:dynamodb:eu-west-1:123456789012:table/existing-orders",
    "ChangeGroupBy": "CustomerId",
    "RecordMapping": '{"op":"=put","key":{"PK":"/user"},"ts":"/version","item":"$body"}',
    "EventTimePointer": "/eventTime",
    "ChangeSortKey": "SK:orders-total",
    "ChangeCount": "orders",
    "ChangeSum": "amount:Amount",
    "ChangeSkipAttributes": "_tx*,internal",
    "SweeperScheduleName": "existing-tx-sweeper",
    "WindowSeconds": "3600",
    "MaxRecordAgeSeconds": "3600",
    "CounterWindowSeconds": "3600",
    "KafkaClusterArn": "arn:aws:kafka:eu-west-1:123456789012:cluster/existing-cluster/"
                       "6f0c0b7e-1111-2222-3333-444455556666-1",
    "KafkaBootstrapServers": "kafka-1.example.internal:9096,kafka-2.example.internal:9096",
    "KafkaTopic": "orders",
    "KafkaConsumerGroupId": "orders-writer",
    "KafkaSecretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kafka-writer-AbCdEf",
}
# The alarms a scheduled function needs besides its errors and its schedule not running, by
# binary: (what, EMF metric).
SCHEDULED_ALARMS = {
    "tx-sweeper": [("sweep errors", "Errors"),
                   ("the oldest open transaction's lag", "OldestStaleSeconds")],
}
NOVALUE = object()
# An event source mapping's kind by the service of its EventSourceArn.
SERVICES = {"AWS::Kinesis::Stream": "kinesis", "AWS::SQS::Queue": "sqs", "AWS::DynamoDB::Table": "dynamodb"}
KINDS = {"kinesis": "Kinesis", "sqs": "SQS", "dynamodb": "DynamoDB"}


class CfnLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML with CloudFormation's short tags: `!Ref X` becomes {"Ref": "X"}. (cfn-lint's
    decoder, cfnlint.decode.cfn_yaml, gives the same shapes, but importing cfn-lint costs ~1 s
    a process: 13 s of check-template.sh's 28.)"""


def _tag(loader, suffix, node):
    name = "Ref" if suffix == "Ref" else ("Condition" if suffix == "Condition" else f"Fn::{suffix}")
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    if name == "Fn::GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {name: value}


CfnLoader.add_multi_constructor("!", _tag)


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=CfnLoader)  # noqa: S506 (a SafeLoader subclass)


def as_list(value):
    return value if isinstance(value, list) else [value]


def walk(value):
    """Every dict and list inside value, value included."""
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)


class Template:
    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.name = os.path.relpath(self.path)
        self.data = load(self.path)
        self.params = self.data.get("Parameters", {}) or {}
        self.resources = self.data.get("Resources", {}) or {}
        self.conditions = self.data.get("Conditions", {}) or {}
        self.mappings = self.data.get("Mappings", {}) or {}
        self.rules = self.data.get("Rules", {}) or {}

    def nested(self):
        """(logical id, path) of the stacks nested from local files."""
        for name, res in of_type(self.resources, "AWS::Serverless::Application").items():
            location = res.get("Properties", {}).get("Location")
            if isinstance(location, str) and not re.match(r"^(s3|https?)://", location):
                yield name, os.path.normpath(os.path.join(os.path.dirname(self.path), location))

    def function_props(self, fn):
        """A function's raw properties with the Globals SAM merges in."""
        merged = dict(self.data.get("Globals", {}).get("Function", {}))
        merged.update(fn.get("Properties", {}))
        return merged


# ------------------------------------------------------------------ configurations

_TEMPLATES = {}


def template(path):
    """The template at path, read once."""
    if path not in _TEMPLATES:
        _TEMPLATES[path] = Template(path)
    return _TEMPLATES[path]


class Config:
    """One set of parameter values: conditions and intrinsic functions evaluate under it."""

    def __init__(self, template, values, label, prefix=""):
        self.t, self.values, self.label, self.prefix = template, values, label, prefix
        self._conditions = {}

    def param(self, name):
        spec = self.t.params[name]
        value = self.values.get(name, spec.get("Default"))
        if spec.get("Type") == "CommaDelimitedList":
            return [v.strip() for v in str(value).split(",")] if value not in (None, "") else []
        return "" if value is None else str(value)

    def condition(self, name):
        if name not in self._conditions:
            self._conditions[name] = self.truth(self.t.conditions[name])
        return self._conditions[name]

    def truth(self, expr):
        (fn, args), = expr.items()
        if fn == "Condition":
            return self.condition(args)
        if fn == "Fn::Equals":
            a, b = (self.eval(x) for x in args)
            return str(a) == str(b)
        if fn == "Fn::Not":
            return not self.truth(args[0])
        if fn == "Fn::And":
            return all(self.truth(x) for x in args)
        if fn == "Fn::Or":
            return any(self.truth(x) for x in args)
        raise ValueError(f"{self.t.name}: condition function {fn} is not understood here")

    def rules_hold(self):
        for rule in self.t.rules.values():
            if "RuleCondition" in rule and not self.truth(rule["RuleCondition"]):
                continue
            if not all(self.truth(a["Assert"]) for a in rule.get("Assertions", [])):
                return False
        return True

    def sub(self, text, variables):
        def one(m):
            name = m.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in variables:
                return str(variables[name])
            value = self.eval({"Fn::GetAtt": name.split(".")} if "." in name else {"Ref": name})
            return ",".join(value) if isinstance(value, list) else str(value)
        return re.sub(r"\$\{([^}]+)\}", one, text)

    def eval(self, value):
        """The value with its intrinsic functions applied; a resource becomes "{Id}" or
        "{Id.Attribute}", AWS::NoValue the NOVALUE marker."""
        if isinstance(value, list):
            return [v for v in (self.eval(x) for x in value) if v is not NOVALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (fn, args), = value.items()
            if fn == "Ref":
                if args == "AWS::NoValue":
                    return NOVALUE
                if args in PSEUDO:
                    return PSEUDO[args]
                if args in self.t.params:
                    return self.param(args)
                return "{" + self.prefix + args + "}"
            if fn == "Fn::GetAtt":
                return "{" + self.prefix + ".".join(args) + "}"
            if fn == "Fn::If":
                return self.eval(args[1] if self.condition(args[0]) else args[2])
            if fn == "Fn::Sub":
                text, variables = (args, {}) if isinstance(args, str) else args
                return self.sub(text, {k: self.eval(v) for k, v in variables.items()})
            if fn == "Fn::Select":
                return self.eval(args[1])[int(self.eval(args[0]))]
            if fn == "Fn::Split":
                return str(self.eval(args[1])).split(args[0])
            if fn == "Fn::Join":
                return args[0].join(str(x) for x in self.eval(args[1]))
            if fn == "Fn::FindInMap":
                m, k1, k2 = (str(self.eval(x)) for x in args)
                return self.t.mappings[m][k1][k2]
        return {k: v for k, v in ((k, self.eval(v)) for k, v in value.items()) if v is not NOVALUE}

    def resources(self):
        """The resources this configuration creates, resolved; functions with their Globals;
        those of the stacks it nests from local files too, as "<Application>/<Id>", each under
        the parameters the Application passes."""
        out = {}
        nested = dict(self.t.nested())
        for name, res in self.t.resources.items():
            if "Condition" in res and not self.condition(res["Condition"]):
                continue
            props = res.get("Properties", {})
            if res.get("Type") == "AWS::Serverless::Function":
                props = self.t.function_props(res)
            out[self.prefix + name] = {"Type": res.get("Type"), "Metadata": res.get("Metadata", {}),
                                       "Properties": self.eval(props)}
            if name in nested and os.path.isfile(nested[name]):
                values = {k: ",".join(v) if isinstance(v, list) else str(v)
                          for k, v in self.eval(props.get("Parameters", {})).items()}
                child = Config(template(nested[name]), values, self.label, f"{self.prefix}{name}/")
                out.update(child.resources())
        return out


def switches(t, depth=0):
    """Parameters with AllowedValues that decide what the configuration checks read: a
    Condition used outside table properties and IAM (tables are checked as written, policies
    one at a time by Guard), or one the stack passes to a nested stack's switch."""
    def used(value):
        for v in walk(value):
            if isinstance(v, dict):
                if isinstance(v.get("Condition"), str):
                    yield v["Condition"]
                if isinstance(v.get("Fn::If"), list):
                    yield v["Fn::If"][0]
    outside = {k: (r if r.get("Type") != "AWS::DynamoDB::Table" else {"Condition": r.get("Condition")})
               for k, r in t.resources.items() if not r.get("Type", "").startswith("AWS::IAM::")}
    todo, conditions = list(used([outside, t.data.get("Globals", {}), t.data.get("Outputs", {})])), set()
    while todo:
        c = todo.pop()
        if c and c not in conditions and c in t.conditions:
            conditions.add(c)
            todo.extend(used(t.conditions[c]))
    read = {v["Ref"] for v in walk([t.conditions[c] for c in conditions]) if isinstance(v, dict) and "Ref" in v}
    for name, path in t.nested():
        if depth < 8 and os.path.isfile(path):
            passed = t.resources[name].get("Properties", {}).get("Parameters", {})
            read |= {passed[p]["Ref"] for p in switches(template(path), depth + 1)
                     if isinstance(passed.get(p), dict) and "Ref" in passed[p]}
    return [p for p in t.params if p in read and "AllowedValues" in t.params[p]]


def sample(name, values):
    """The value a configuration gives parameter name (None: SAMPLES has none)."""
    if name == "StreamArn":
        name += "@DynamoDB" if values.get("StreamType") == "DynamoDB" else "@Kinesis"
    if name.endswith("TableName"):
        return "existing-" + re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
    return SAMPLES.get(name)


def configurations(t, errors):
    """Every configuration of t its Rules accept (see the module's documentation)."""
    sw = switches(t)
    # Parameters a configuration leaves empty or gives: default "" (an existing resource or an
    # optional setting), or no default at all (always given).
    free = {p: spec for p, spec in t.params.items() if "AllowedValues" not in spec}
    optional = [p for p, spec in free.items() if spec.get("Default") == ""]
    required = [p for p, spec in free.items() if "Default" not in spec]
    combos = [dict(zip(sw, vs)) for vs in itertools.product(
        *[[str(v) for v in t.params[p]["AllowedValues"]] for p in sw])] or [{}]
    seen, out = set(), []

    def add(values, label):
        for p in timeout_params(t):
            values.setdefault(p, str(t.params[p].get("MaxValue", t.params[p].get("Default"))))
        for p in visibility_params(t):
            spec = t.params[p]
            allowed = [number(v) for v in spec.get("AllowedValues", [])]
            values.setdefault(p, str(min(allowed) if allowed else spec.get("MinValue", spec.get("Default"))))
        for p in sw:
            values.setdefault(p, str(t.params[p].get("Default")))
        for p in required:
            values.setdefault(p, sample(p, values))
        key = tuple(sorted(values.items()))
        if key in seen:
            return
        seen.add(key)
        config = Config(t, values, label)
        if config.rules_hold():
            out.append(config)

    def given(base, names):
        values = dict(base)
        for p in names:
            value = sample(p, values)
            if value is None:
                errors.append(f"{t.name}: parameter {p} has no sample value: add one to SAMPLES "
                              "in scripts/check_template.py")
                continue
            values[p] = value
        return values

    add({}, "defaults")
    for combo in combos:
        label = ", ".join(f"{k}={v}" for k, v in combo.items())
        add(dict(combo), f"{label}, created")
        add(given(combo, optional), f"{label}, existing")
    for p in optional + required:
        value = sample(p, {})
        pattern = t.params[p].get("AllowedPattern")
        if value is not None and pattern:
            for v in (value.split(",") if t.params[p].get("Type") == "CommaDelimitedList" else [value]):
                if not re.fullmatch(pattern, v):
                    errors.append(f"{t.name}: the sample {v!r} does not match parameter {p}'s "
                                  f"AllowedPattern {pattern!r}")
    return out


# ------------------------------------------------------------------ identities

def ident(value):
    """What a reference points to: a logical id ("{Id.Attr}" -> Id), a queue or stream name
    (from an ARN), or the string itself."""
    if isinstance(value, str):
        if value.startswith("{") and value.endswith("}"):
            return value[1:-1].split(".")[0]
        if value.startswith("arn:"):
            parts = value.split(":", 5)
            if len(parts) == 6:
                # A stream's name follows "stream/"; a queue's is the whole resource part.
                return parts[5].split("/", 1)[-1] if parts[2] == "kinesis" else parts[5]
    return value


def event_sources(view):
    """(function id, kind, properties) of every event source: SAM Events and
    AWS::Lambda::EventSourceMapping resources. Kind: Kinesis, DynamoDB, SQS, ScheduleV2..."""
    for name, res in view.items():
        if res["Type"] == "AWS::Serverless::Function":
            for event in res["Properties"].get("Events", {}).values():
                props = dict(event.get("Properties", {}))
                props["Source"] = props.get("Stream", props.get("Queue"))
                yield name, event.get("Type"), props
        elif res["Type"] == "AWS::Lambda::EventSourceMapping":
            props = dict(res["Properties"])
            source = props["Source"] = props.get("EventSourceArn")
            # The service of a created resource ("{Id.Arn}") or of a given ARN.
            created = view.get(ident(source), {}).get("Type")
            service = SERVICES.get(created)
            if service is None and str(source).startswith("arn:"):
                service = source.split(":")[2]
            kind = "Kafka" if props.get("Topics") else KINDS.get(service)
            yield ident(props.get("FunctionName")), kind, props


def of_type(resources, kind):
    return {k: v for k, v in resources.items() if v.get("Type") == kind}


def size_param(t, value):
    """The parameter a function's MemorySize or Timeout refers to (None when it is fixed)."""
    if isinstance(value, dict) and isinstance(value.get("Ref"), str) and value["Ref"] in t.params:
        return value["Ref"]
    return None


def timeout_bound(t, props):
    """A function's longest timeout: its parameter's MaxValue, or the fixed value."""
    p = size_param(t, props.get("Timeout"))
    if p is not None:
        return number(t.params[p].get("MaxValue"), 900)
    return number(props.get("Timeout", 3), 3)


def timeout_params(t):
    return {size_param(t, t.function_props(fn).get("Timeout"))
            for fn in of_type(t.resources, "AWS::Serverless::Function").values()} - {None}


def visibility_params(t):
    """The parameters a created queue's VisibilityTimeout refers to."""
    return {size_param(t, q.get("Properties", {}).get("VisibilityTimeout"))
            for q in of_type(t.resources, "AWS::SQS::Queue").values()} - {None}


def number(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


# ------------------------------------------------------------------ checks on the raw template

def workspace_binaries():
    """Binary names of the workspace's function crates (package name or [[bin]] names)."""
    binaries = {}
    for manifest in sorted(glob.glob("functions/*/Cargo.toml")):
        with open(manifest, "rb") as f:
            cargo = tomllib.load(f)
        package = cargo["package"]["name"]
        bins = [b["name"] for b in cargo.get("bin", [])] or [package]
        for b in bins:
            binaries[b] = package
    return binaries


def check_packaged_code(t, name, binary, code_uri, errors):
    """A packaged function's code: <binary>.zip beside the template (a zip holding an
    executable bootstrap), or {Bucket: !Ref CodeBucket, Key: !Sub "${CodeKeyPrefix}<binary>.zip"}."""
    s3 = {"Bucket": {"Ref": "CodeBucket"}, "Key": {"Fn::Sub": "${CodeKeyPrefix}" + f"{binary}.zip"}}
    if code_uri == s3:
        for p in ("CodeBucket", "CodeKeyPrefix"):
            if p not in t.params:
                errors.append(f"{t.name}: function {name}: CodeUri reads parameter {p}, which is not declared")
        return
    if code_uri != f"{binary}.zip":
        errors.append(f"{t.name}: function {name}: CodeUri {code_uri!r} is neither {binary}.zip "
                      "beside the template nor CodeBucket/CodeKeyPrefix")
        return
    path = os.path.join(os.path.dirname(t.path), code_uri)
    try:
        with zipfile.ZipFile(path) as z:
            info = z.getinfo("bootstrap")
            if not (info.external_attr >> 16) & 0o111:
                errors.append(f"{t.name}: function {name}: {code_uri}'s bootstrap is not executable")
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        errors.append(f"{t.name}: function {name}: {code_uri} is not a zip with a bootstrap ({e})")


def check_functions(t, binaries, errors):
    """Every function's BuildProperties Binary is a binary of the workspace and its CodeUri the
    workspace (relative to the template; packaged: the binary's zip)."""
    for name, fn in of_type(t.resources, "AWS::Serverless::Function").items():
        props = t.function_props(fn)
        meta = fn.get("Metadata", {})
        binary = meta.get("BuildProperties", {}).get("Binary")
        if binary not in binaries:
            errors.append(f"{t.name}: function {name}: BuildProperties Binary {binary!r} is not a binary of functions/*")
        code_uri = props.get("CodeUri")
        workspace = os.path.join(os.path.dirname(t.path), str(code_uri))
        if PACKAGED:
            check_packaged_code(t, name, binary, code_uri, errors)
        elif not isinstance(code_uri, str) or os.path.realpath(workspace) != os.getcwd() \
                or not os.path.isfile(os.path.join(workspace, "Cargo.toml")):
            errors.append(f"{t.name}: function {name}: CodeUri {code_uri!r} is not the cargo "
                          "workspace (relative to the template)")


def policy_documents(resources):
    """(resource name, policy document) of every inline and managed IAM policy."""
    for name, res in resources.items():
        props = res.get("Properties", {})
        if res.get("Type") == "AWS::IAM::Role":
            for p in as_list(props.get("Policies", [])):
                if isinstance(p, dict):
                    yield name, p.get("PolicyDocument", {})
        elif res.get("Type") in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy", "AWS::IAM::RolePolicy"):
            yield name, props.get("PolicyDocument", {})


def policy_parameters(t, depth=0):
    """The parameters of t that name a resource in a policy: its own policies', and those it
    passes to a nested stack that uses them so."""
    def refs(value):
        for v in walk(value):
            if isinstance(v, dict):
                if isinstance(v.get("Ref"), str):
                    yield v["Ref"]
                sub = v.get("Fn::Sub")
                if sub is not None:
                    yield from re.findall(r"\$\{([A-Za-z0-9]+)\}", sub if isinstance(sub, str) else sub[0])
    used = {r for _, doc in policy_documents(t.resources) for r in refs(doc)}
    for name, path in t.nested():
        if depth < 8 and os.path.isfile(path):
            passed = t.resources[name].get("Properties", {}).get("Parameters", {})
            for p in policy_parameters(template(path), depth + 1) & set(passed):
                used.update(refs(passed[p]))
    return used & set(t.params)


def check_policy_parameters(t, errors):
    """A parameter that names a policy's resource (in this stack or one it nests) must not
    let a wildcard in."""
    for p in sorted(policy_parameters(t)):
        spec = t.params[p]
        pattern = spec.get("AllowedPattern")
        if "AllowedValues" in spec:
            if any("*" in str(v) for v in spec["AllowedValues"]):
                errors.append(f"{t.name}: parameter {p} allows a wildcard into a policy")
            continue
        probe = (sample(p, {}) or "name").split(",")[0]
        probes = ["*", probe[:-1] + "*", probe + "*"]
        if not pattern or any(re.fullmatch(pattern, x) for x in probes):
            errors.append(f"{t.name}: parameter {p} names a policy's resource and its "
                          "AllowedPattern lets a wildcard in")


def check_gap_mapping(t, errors):
    """A TX_REDELIVERY_GAP_SECONDS read from a mapping keyed by the queue's visibility timeout
    is that timeout + the coordinator's timeout, for every entry."""
    coordinator = [t.function_props(fn) for fn in of_type(t.resources, "AWS::Serverless::Function").values()
                   if fn.get("Metadata", {}).get("BuildProperties", {}).get("Binary") == "tx-coordinator"]
    timeout = timeout_bound(t, coordinator[0]) if coordinator else None
    for fn in of_type(t.resources, "AWS::Serverless::Function").values():
        env = t.function_props(fn).get("Environment", {}).get("Variables", {})
        gap = env.get("TX_REDELIVERY_GAP_SECONDS")
        if isinstance(gap, dict) and "Fn::FindInMap" in gap:
            m, key, attr = gap["Fn::FindInMap"]
            if timeout is None:
                errors.append(f"{t.name}: TX_REDELIVERY_GAP_SECONDS from a mapping without a tx-coordinator")
                continue
            spec = t.params.get(key.get("Ref") if isinstance(key, dict) else None, {})
            for value in spec.get("AllowedValues", []):
                entry = t.mappings.get(m, {}).get(str(value), {}).get(attr)
                if number(entry, -1) < number(value) + timeout:
                    errors.append(f"{t.name}: mapping {m}[{value}].{attr} is {entry}, shorter than "
                                  f"the visibility timeout {value} + the coordinator's timeout {timeout}")


# ------------------------------------------------------------------ checks of one configuration

def alarms_on(view, metric, dimension, target):
    """(name, properties) of every alarm on metric whose dimension is target."""
    for name, alarm in of_type(view, "AWS::CloudWatch::Alarm").items():
        p = alarm["Properties"]
        dims = {d.get("Name"): ident(d.get("Value")) for d in p.get("Dimensions", [])}
        if p.get("MetricName") == metric and dims.get(dimension) == target:
            yield name, p


# The alarm on a stream or Kafka consumer falling behind: (what, namespace, metric).
LAG = {"Kinesis": ("a stream consumer falling behind", "AWS/Lambda", "IteratorAge"),
       "DynamoDB": ("a stream consumer falling behind", "AWS/Lambda", "IteratorAge"),
       "Kafka": ("a Kafka consumer falling behind", "AWS/Lambda", "OffsetLag")}


def check_alarms(config, view, where, errors):
    """An alarm for each failure path: function errors, dead letters kept (EMF `Invalid`), a
    stream or Kafka consumer falling behind, a queue's backlog, every queue of messages given
    up on (a created queue's redrive target; an existing queue's <X>RedriveArn parameter;
    failure destinations), a scheduled function not running and its own metrics."""
    emf = config.param("MetricsNamespace") if "MetricsNamespace" in config.t.params else None

    def need(what, namespace, metric, dimension, target):
        if not any(p.get("Namespace") == namespace for _, p in alarms_on(view, metric, dimension, target)):
            errors.append(f"{where}: no alarm on {namespace}/{metric} for {target}: {what}")

    failure_queues = set()
    queues = of_type(view, "AWS::SQS::Queue")
    for q in queues.values():
        target = q["Properties"].get("RedrivePolicy", {}).get("deadLetterTargetArn")
        if target:
            failure_queues.add(ident(target))
    for name, fn in of_type(view, "AWS::Serverless::Function").items():
        need("whole invocations failing", "AWS/Lambda", "Errors", "FunctionName", name)
        env = fn["Properties"].get("Environment", {}).get("Variables", {})
        if any(k.endswith("_DEAD_LETTER_TABLE") for k in env):
            need("records kept as dead letters", emf, "Invalid", "Function", name)
    for fn, kind, ev in event_sources(view):
        if kind in LAG:
            need(*LAG[kind], "FunctionName", fn)
            dest = ev.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
            if dest:
                failure_queues.add(ident(dest))
        elif kind == "SQS":
            queue = ident(ev["Source"])
            need("a queue backlog", "AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", queue)
            if queue not in queues:
                # An existing queue: its redrive queue comes as parameter <X>RedriveArn.
                given = [p for p in config.t.params if config.param(p) == ev["Source"]]
                redrive = [config.param(p[:-3] + "RedriveArn") for p in given
                           if p.endswith("Arn") and p[:-3] + "RedriveArn" in config.t.params]
                if not redrive or not redrive[0]:
                    errors.append(f"{where}: existing queue {queue} of {fn}: no <X>RedriveArn "
                                  "parameter gives its redrive queue (messages given up on)")
                else:
                    failure_queues.add(ident(redrive[0]))
            elif not queues[queue]["Properties"].get("RedrivePolicy"):
                errors.append(f"{where}: queue {queue} of {fn} has no RedrivePolicy")
        elif kind in ("ScheduleV2", "Schedule"):
            binary = view.get(fn, {}).get("Metadata", {}).get("BuildProperties", {}).get("Binary")
            for what, metric in SCHEDULED_ALARMS.get(binary, []):
                need(what, emf, metric, "Function", fn)
            need("the schedule not running", "AWS/Lambda", "Invocations", "FunctionName", fn)
        else:
            errors.append(f"{where}: {fn}: an event source of unknown kind ({ev['Source']})")
    for queue in sorted(failure_queues, key=str):
        need("messages given up on", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", queue)


def check_sources(view, where, errors):
    """A created queue holds a message longer than 6 x its function's timeout (the sources'
    own settings are guard rules); the configurations give each function its longest timeout
    and each created queue its shortest visibility timeout."""
    queues = of_type(view, "AWS::SQS::Queue")
    functions = of_type(view, "AWS::Serverless::Function")
    for fn, kind, ev in event_sources(view):
        timeout = number(functions.get(fn, {}).get("Properties", {}).get("Timeout", 3), 3)
        queue = ident(ev["Source"])
        if kind == "SQS" and queue in queues:
            visibility = number(queues[queue]["Properties"].get("VisibilityTimeout", 30))
            if visibility < 6 * timeout:
                errors.append(f"{where}: queue {queue}: VisibilityTimeout {visibility} < 6 x {fn}'s timeout {timeout}")


def functions_of(view, binary):
    for name, fn in of_type(view, "AWS::Serverless::Function").items():
        if fn["Metadata"].get("BuildProperties", {}).get("Binary") == binary:
            yield name, fn["Properties"], fn["Properties"].get("Environment", {}).get("Variables", {})


def check_horizons(view, where, errors):
    """The transaction protocol's time relations (issue 8), where both sides are known: the
    idempotency horizon covers every redelivery (created queues' retention, redrive included),
    the sweeper's stale threshold exceeds the gap between two deliveries, and its lag alarm
    sits above that threshold. (That the gap covers the visibility timeout + the coordinator's
    timeout is check_gap_mapping's, for every visibility timeout allowed.)"""
    queues = of_type(view, "AWS::SQS::Queue")
    longest_retention = 0
    for name, _, env in functions_of(view, "tx-coordinator"):
        retain = number(env.get("TX_RETAIN_SECONDS", 1296000))
        horizon = number(env.get("TX_REDELIVERY_HORIZON_SECONDS", 1209600))
        if retain < horizon:
            errors.append(f"{where}: tx-coordinator: TX_RETAIN_SECONDS {retain} < TX_REDELIVERY_HORIZON_SECONDS {horizon}")
        for fn, kind, ev in event_sources(view):
            if fn != name or kind != "SQS" or ident(ev["Source"]) not in queues:
                continue
            q = queues[ident(ev["Source"])]["Properties"]
            redrive = ident(q.get("RedrivePolicy", {}).get("deadLetterTargetArn"))
            for queue in [q, queues.get(redrive, {}).get("Properties", {})]:
                longest_retention = max(longest_retention, number(queue.get("MessageRetentionPeriod", 345600)))
        if longest_retention > horizon:
            errors.append(f"{where}: tx-coordinator: a TX queue keeps messages {longest_retention} s, "
                          f"longer than TX_REDELIVERY_HORIZON_SECONDS {horizon}")
    for name, _, env in functions_of(view, "tx-sweeper"):
        stale = number(env.get("TX_STALE_AFTER_SECONDS", 900))
        gap = number(env.get("TX_REDELIVERY_GAP_SECONDS", 420))
        if stale <= gap:
            errors.append(f"{where}: tx-sweeper: TX_STALE_AFTER_SECONDS {stale} <= TX_REDELIVERY_GAP_SECONDS {gap}")
        for alarm_name, p in alarms_on(view, "OldestStaleSeconds", "Function", name):
            if number(p.get("Threshold")) <= stale:
                errors.append(f"{where}: alarm {alarm_name}: threshold {p.get('Threshold')} is not above "
                              f"TX_STALE_AFTER_SECONDS {stale} (it would fire on every stale transaction)")


# Settings counter-rollup must read as counter-writer does: the same tables, mode, window and
# item layout (the roll-up writes the writer's counter items and reads its journal).
ROLLUP_SHARED = ("COUNTER_TABLE", "COUNTER_MODE", "COUNTER_JOURNAL_TABLE", "COUNTER_WINDOW_SECONDS",
                 "COUNTER_WINDOW_BUCKETS", "COUNTER_MAX_KEYS_PER_SECOND", "COUNTER_ITEM_BUDGET_BYTES",
                 "COUNTER_OTHER_DATA_BYTES", "COUNTER_ATTRIBUTE_PREFIX")


def check_rollup(view, where, errors):
    """The counter journal: a roll-up runs wherever a writer journals, and both read the same
    settings. (That the journal table has the stream and TTL the roll-up reads is
    dynamo-provision's test the_counter_journal_has_a_stream_and_a_ttl.)"""
    writers = list(functions_of(view, "counter-writer"))
    rollups = list(functions_of(view, "counter-rollup"))
    for name, _, env in writers:
        journal = env.get("COUNTER_JOURNAL_TABLE")
        if not journal or env.get("COUNTER_MODE", "journal") != "journal":
            continue
        if not any(r_env.get("COUNTER_JOURNAL_TABLE") == journal for _, _, r_env in rollups):
            errors.append(f"{where}: {name} journals into {ident(journal)} but no counter-rollup "
                          "reads it (its keys would never reach the counters)")
    for name, _, env in rollups:
        peers = [(w, w_env) for w, _, w_env in writers
                 if w_env.get("COUNTER_JOURNAL_TABLE") == env.get("COUNTER_JOURNAL_TABLE")]
        for writer, w_env in peers:
            for key in ROLLUP_SHARED:
                if env.get(key) != w_env.get(key):
                    errors.append(f"{where}: {name} and {writer} differ in {key} "
                                  f"({env.get(key)!r} vs {w_env.get(key)!r})")


# ------------------------------------------------------------------ docs

def check_docs(templates, docs, errors):
    """Every resource the docs name exists in some template; every alarm has its runbook entry."""
    text = ""
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            text += f.read() + "\n"
    declared = set()
    for t in templates:
        declared.update(t.resources)
    names = ", ".join(os.path.relpath(d) for d in docs)
    # A capitalised word ending like a resource, not an IAM action (`dynamodb:DescribeStream`).
    pattern = re.compile(r"(?<![:\w])([A-Z][A-Za-z0-9]*(?:%s))\b" % "|".join(DOC_SUFFIXES))
    for name in sorted(set(pattern.findall(text))):
        if name not in declared and name not in DOC_SUFFIXES:
            errors.append(f"the docs ({names}) name {name}, which no template declares")
    for t in templates:
        for name in sorted(of_type(t.resources, "AWS::CloudWatch::Alarm")):
            if f"`{name}`" not in text:
                errors.append(f"{t.name}: alarm {name} has no runbook entry in the docs ({names})")


# ------------------------------------------------------------------ main

def with_nested(paths, errors):
    """The templates, each followed by the stacks it nests from local files (once each)."""
    out, seen = [], set()

    def visit(path, depth):
        real = os.path.realpath(path)
        if real in seen:
            return
        if not os.path.isfile(path):
            errors.append(f"{os.path.relpath(path)}: no such template")
            return
        seen.add(real)
        t = template(path)
        out.append(t)
        for name, child in t.nested():
            if not os.path.isfile(child):
                errors.append(f"{t.name}: nested stack {name}: Location {os.path.relpath(child)} does not exist")
            elif depth < 8:
                visit(child, depth + 1)
    for p in paths:
        visit(p, 0)
    return out


def deploys(t, depth=0):
    """The binaries run by t's functions and by those of the stacks it nests."""
    binaries = {fn.get("Metadata", {}).get("BuildProperties", {}).get("Binary")
                for fn in of_type(t.resources, "AWS::Serverless::Function").values()}
    for _, child in t.nested():
        if os.path.isfile(child) and depth < 8:
            binaries |= deploys(template(child), depth + 1)
    return binaries


def check_deployed(templates, binaries, errors):
    """The all-in-one entry (a template nesting stacks with functions: the demo) deploys every
    binary of the workspace; without one, the templates together do."""
    entries = [t for t in templates if any(os.path.isfile(c) and of_type(
        template(c).resources, "AWS::Serverless::Function") for _, c in t.nested())]
    if entries:
        deployed_by = {t.name: deploys(t) for t in entries}
    else:
        deployed_by = {", ".join(t.name for t in templates): set().union(*map(deploys, templates))}
    for names, deployed in deployed_by.items():
        for binary, package in binaries.items():
            if binary not in deployed:
                errors.append(f"workspace binary {binary} (functions/{package}) is deployed by none of {names}")


PACKAGED = False


def check(paths, docs):
    """The violations of the templates at paths (with the stacks they nest) and of the docs, in
    the workspace the current directory is; the templates and the configurations checked."""
    _TEMPLATES.clear()
    errors = []
    templates = with_nested(paths, errors)
    binaries = workspace_binaries()
    check_deployed(templates, binaries, errors)
    configs = 0
    given = {os.path.realpath(p) for p in paths}
    for t in templates:
        check_functions(t, binaries, errors)
        if PACKAGED:
            continue
        if os.path.realpath(t.path) not in given and not of_type(t.resources, "AWS::Serverless::Function"):
            # A stack only nested (stacks/shared): checked in its parents' configurations,
            # under the parameters they pass (theirs carry the AllowedPatterns).
            continue
        check_policy_parameters(t, errors)
        check_gap_mapping(t, errors)
        for config in configurations(t, errors):
            configs += 1
            view = config.resources()
            where = f"{t.name} [{config.label}]"
            check_alarms(config, view, where, errors)
            check_sources(view, where, errors)
            check_horizons(view, where, errors)
            check_rollup(view, where, errors)
    if not PACKAGED:
        check_docs(templates, docs, errors)
    return errors, templates, configs


def main():
    global PACKAGED
    args = sys.argv[1:]
    if "--packaged" in args:
        PACKAGED = True
        args.remove("--packaged")
    dirs = [a for a in args if os.path.isdir(a)]
    paths = [a for a in args if a.endswith((".yaml", ".yml"))] or ["template.yaml"]
    docs = [a for a in args if a.endswith(".md")] or ["README.md"] + sorted(
        d for d in glob.glob("docs/*.md")
        if os.path.basename(d) != "history.md")  # the lab notes name earlier versions' resources
    unknown = [a for a in args if a not in dirs and not a.endswith((".yaml", ".yml", ".md"))]
    if unknown:
        sys.exit(f"usage: check_template.py [--packaged] [DIR ...] [TEMPLATE.yaml ...] [DOC.md ...] (not {unknown})")
    here, failed = os.getcwd(), False
    for d in dirs or [""]:
        os.chdir(os.path.join(here, d))
        errors, templates, configs = check(paths, docs)
        failed = failed or bool(errors)
        # One line per violation, with the first configuration that shows it.
        shown = set()
        for e in errors:
            key = re.sub(r" \[[^\]]*\]", "", e)
            if key not in shown:
                shown.add(key)
                print(f"template-check: {d + ': ' if d else ''}{e}", file=sys.stderr)
    if failed:
        sys.exit(1)
    if PACKAGED:
        print(f"template-check: {len(templates)} packaged templates: every function's code is its "
              "binary's zip, every binary packaged")
        return
    print(f"template-check: {len(templates)} templates in {configs} configurations: "
          "workspace binaries, policy parameters without wildcards, an alarm per failure path, "
          "queues against timeouts, horizons, docs names exist")


if __name__ == "__main__":
    main()
