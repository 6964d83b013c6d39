#!/usr/bin/env python3
"""Operational checks of template.yaml that cfn-lint does not make (run by check-template.sh).

Each check names what an operator relies on:
  * every DynamoDB table is Retain (deletion and replacement), point-in-time recoverable and
    deletion-protected (through the template's parameters);
  * every function runs on arm64, is built by cargo-lambda from a binary of the workspace,
    and every function crate of the workspace is deployed;
  * no IAM policy has a wildcard Action or Resource (except the X-Ray write statement, which
    AWS offers no resource-level permission for);
  * each failure path has an alarm: function errors, stream (Kinesis, DynamoDB) iterator age, dead letters kept
    (EMF metric `Invalid`), source queue age, redrive queues and Kinesis failure destinations,
    the sweeper's errors, lag and heartbeat; alarm actions only when AlarmTopicArn is set;
  * Kinesis streams encrypted, SQS SSE explicit, visibility >= 6x the function timeout,
    MaximumConcurrency on SQS event sources, the sweeper alone and never retried;
  * the transaction protocol's horizons: TX_RETAIN_SECONDS >= TX_REDELIVERY_HORIZON_SECONDS >=
    the TX queues' retention (redrive included), and TX_STALE_AFTER_SECONDS >
    TX_REDELIVERY_GAP_SECONDS >= the TX queue's visibility timeout + the coordinator's timeout;
  * every alarm, role, table, queue, stream and function the README names exists, and every
    alarm has its runbook entry there.

Usage: check_template.py [template] [readme]. Exit status 1 with one line per violation.
"""

import glob
import os
import re
import sys
import tomllib

import yaml

# The only statement allowed a wildcard Resource: X-Ray has no resource-level permissions.
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
# Names the README may use that are not resources of the template.
README_SUFFIXES = ("Table", "Role", "Alarm", "Queue", "QueueRedrive", "StreamFailures",
                   "Function", "Stream", "LogGroup")


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags: `!Ref X` becomes {"Ref": "X"}."""


def _tag(loader, suffix, node):
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


CfnLoader.add_multi_constructor("!", _tag)


def load(path):
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=CfnLoader)  # noqa: S506 (a SafeLoader subclass)


def of_type(resources, kind):
    return {k: v for k, v in resources.items() if v.get("Type") == kind}


def ref_name(value):
    """The logical id a !Ref / !GetAtt X.Arn / !GetAtt X.QueueName points to."""
    if isinstance(value, dict):
        if "Ref" in value:
            return value["Ref"]
        if "Fn::GetAtt" in value:
            target = value["Fn::GetAtt"]
            return target.split(".")[0] if isinstance(target, str) else target[0]
    return None


def function_props(template, fn):
    """A function's properties with the Globals SAM merges in."""
    merged = dict(template.get("Globals", {}).get("Function", {}))
    merged.update(fn.get("Properties", {}))
    return merged


def check_tables(resources, errors):
    for name, table in of_type(resources, "AWS::DynamoDB::Table").items():
        for policy in ("DeletionPolicy", "UpdateReplacePolicy"):
            if table.get(policy) != "Retain":
                errors.append(f"table {name}: {policy} is not Retain")
        props = table.get("Properties", {})
        pitr = props.get("PointInTimeRecoverySpecification", {}).get("PointInTimeRecoveryEnabled")
        if pitr != {"Fn::If": ["PitrOn", True, False]}:
            errors.append(f"table {name}: PointInTimeRecoveryEnabled is not the PointInTimeRecovery parameter")
        if props.get("DeletionProtectionEnabled") != {"Fn::If": ["DeletionProtectionOn", True, False]}:
            errors.append(f"table {name}: DeletionProtectionEnabled is not the DeletionProtection parameter")


def workspace_binaries(root):
    """Binary names of the workspace's function crates (package name or [[bin]] names)."""
    binaries = {}
    for manifest in sorted(glob.glob(os.path.join(root, "functions", "*", "Cargo.toml"))):
        with open(manifest, "rb") as f:
            cargo = tomllib.load(f)
        package = cargo["package"]["name"]
        bins = [b["name"] for b in cargo.get("bin", [])] or [package]
        for b in bins:
            binaries[b] = package
    return binaries


def check_functions(template, root, errors):
    resources = template["Resources"]
    binaries = workspace_binaries(root)
    deployed = set()
    for name, fn in of_type(resources, "AWS::Serverless::Function").items():
        props = function_props(template, fn)
        if props.get("Architectures") != ["arm64"]:
            errors.append(f"function {name}: Architectures is {props.get('Architectures')}, not [arm64]")
        meta = fn.get("Metadata", {})
        binary = meta.get("BuildProperties", {}).get("Binary")
        if meta.get("BuildMethod") != "rust-cargolambda":
            errors.append(f"function {name}: Metadata BuildMethod is not rust-cargolambda")
        if binary not in binaries:
            errors.append(f"function {name}: BuildProperties Binary {binary!r} is not a binary of functions/*")
        deployed.add(binary)
        code_uri = props.get("CodeUri")
        if not isinstance(code_uri, str) or not os.path.isfile(os.path.join(root, code_uri, "Cargo.toml")):
            errors.append(f"function {name}: CodeUri {code_uri!r} is not the cargo workspace")
        if props.get("Handler") != "bootstrap" or not str(props.get("Runtime", "")).startswith("provided."):
            errors.append(f"function {name}: not a custom-runtime bootstrap (Handler/Runtime)")
    for binary, package in binaries.items():
        if binary not in deployed:
            errors.append(f"workspace binary {binary} (functions/{package}) is deployed by no function")


def statements(resources):
    """(resource name, statement) of every inline and managed IAM policy."""
    for name, res in resources.items():
        docs = []
        if res.get("Type") == "AWS::IAM::Role":
            docs = [p.get("PolicyDocument", {}) for p in res.get("Properties", {}).get("Policies", [])]
        elif res.get("Type") in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            docs = [res.get("Properties", {}).get("PolicyDocument", {})]
        for doc in docs:
            for st in doc.get("Statement", []):
                yield name, st


def as_list(value):
    return value if isinstance(value, list) else [value]


def has_wildcard(value):
    if isinstance(value, str):
        return "*" in value
    if isinstance(value, dict):
        return any(has_wildcard(v) for v in value.values())
    if isinstance(value, list):
        return any(has_wildcard(v) for v in value)
    return False


def check_policies(resources, errors):
    for name, st in statements(resources):
        sid = st.get("Sid", "?")
        actions = as_list(st.get("Action", []))
        if "NotAction" in st or "NotResource" in st:
            errors.append(f"policy of {name}, statement {sid}: NotAction/NotResource")
        if any(has_wildcard(a) for a in actions):
            errors.append(f"policy of {name}, statement {sid}: wildcard Action {actions}")
        if has_wildcard(st.get("Resource")) and not set(actions) <= XRAY_ACTIONS:
            errors.append(f"policy of {name}, statement {sid}: wildcard Resource")
    for name, role in of_type(resources, "AWS::IAM::Role").items():
        for arn in as_list(role.get("Properties", {}).get("ManagedPolicyArns", [])):
            if isinstance(arn, str) and arn.startswith("arn:aws:iam::aws:policy/"):
                errors.append(f"role {name}: AWS managed policy {arn} (write the least privilege inline)")


class Alarms:
    """The template's alarms, looked up by metric and dimension target."""

    def __init__(self, resources):
        self.alarms = of_type(resources, "AWS::CloudWatch::Alarm")

    def find(self, namespace, metric, dimension, target):
        for name, alarm in self.alarms.items():
            p = alarm.get("Properties", {})
            if p.get("Namespace") != namespace or p.get("MetricName") != metric:
                continue
            dims = {d.get("Name"): ref_name(d.get("Value")) for d in p.get("Dimensions", [])}
            if dims.get(dimension) == target:
                return name
        return None


def event_sources(props):
    for event in props.get("Events", {}).values():
        yield event.get("Type"), event.get("Properties", {})


def check_alarms(template, errors):
    resources = template["Resources"]
    alarms = Alarms(resources)
    emf = {"Ref": "MetricsNamespace"}

    def need(what, namespace, metric, dimension, target):
        if alarms.find(namespace, metric, dimension, target) is None:
            errors.append(f"no alarm on {namespace}/{metric} for {target}: {what}")

    failure_queues = set()
    for q in of_type(resources, "AWS::SQS::Queue").values():
        target = ref_name(q.get("Properties", {}).get("RedrivePolicy", {}).get("deadLetterTargetArn"))
        if target:
            failure_queues.add(target)
    for name, fn in of_type(resources, "AWS::Serverless::Function").items():
        props = function_props(template, fn)
        need("whole invocations failing", "AWS/Lambda", "Errors", "FunctionName", name)
        env = props.get("Environment", {}).get("Variables", {})
        if any(k.endswith("_DEAD_LETTER_TABLE") for k in env):
            need("records kept as dead letters", emf, "Invalid", "Function", name)
        for kind, ev in event_sources(props):
            if kind in ("Kinesis", "DynamoDB"):
                need("a stream consumer falling behind", "AWS/Lambda", "IteratorAge", "FunctionName", name)
                dest = ev.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
                if ref_name(dest):
                    failure_queues.add(ref_name(dest))
            elif kind == "SQS":
                need("a queue backlog", "AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName",
                     ref_name(ev.get("Queue")))
            elif kind in ("ScheduleV2", "Schedule"):
                need("sweep errors", emf, "Errors", "Function", name)
                need("the oldest open transaction's lag", emf, "OldestStaleSeconds", "Function", name)
                need("the schedule not running", "AWS/Lambda", "Invocations", "FunctionName", name)
    for queue in sorted(failure_queues):
        need("messages given up on", "AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", queue)
    topic = {"Fn::If": ["HasAlarmTopic", [{"Ref": "AlarmTopicArn"}], {"Ref": "AWS::NoValue"}]}
    for name, alarm in alarms.alarms.items():
        for key in ("AlarmActions", "OKActions"):
            if alarm.get("Properties", {}).get(key) != topic:
                errors.append(f"alarm {name}: {key} is not the optional AlarmTopicArn")


def check_sources(template, errors):
    resources = template["Resources"]
    for name, stream in of_type(resources, "AWS::Kinesis::Stream").items():
        enc = stream.get("Properties", {}).get("StreamEncryption", {})
        if enc.get("EncryptionType") != "KMS" or not enc.get("KeyId"):
            errors.append(f"stream {name}: no StreamEncryption with KMS")
    queues = of_type(resources, "AWS::SQS::Queue")
    for name, q in queues.items():
        if q.get("Properties", {}).get("SqsManagedSseEnabled") is not True:
            errors.append(f"queue {name}: SqsManagedSseEnabled is not true")
    for name, fn in of_type(resources, "AWS::Serverless::Function").items():
        props = function_props(template, fn)
        timeout = props.get("Timeout", 3)
        for kind, ev in event_sources(props):
            if kind == "SQS":
                queue = ref_name(ev.get("Queue"))
                visibility = queues.get(queue, {}).get("Properties", {}).get("VisibilityTimeout", 30)
                if not isinstance(visibility, int) or visibility < 6 * timeout:
                    errors.append(f"queue {queue}: VisibilityTimeout {visibility} < 6 x {name}'s timeout {timeout}")
                if "MaximumConcurrency" not in ev.get("ScalingConfig", {}):
                    errors.append(f"function {name}: SQS source {queue} without ScalingConfig MaximumConcurrency")
            if kind in ("ScheduleV2", "Schedule"):
                if props.get("ReservedConcurrentExecutions") != 1:
                    errors.append(f"function {name}: scheduled but ReservedConcurrentExecutions is not 1")
                if ev.get("RetryPolicy", {}).get("MaximumRetryAttempts") != 0:
                    errors.append(f"function {name}: schedule retries (RetryPolicy MaximumRetryAttempts not 0)")
                if props.get("EventInvokeConfig", {}).get("MaximumRetryAttempts") != 0:
                    errors.append(f"function {name}: asynchronous retries (EventInvokeConfig MaximumRetryAttempts not 0)")


def tx_env(template, binary):
    """The environment of every function built from `binary` (e.g. tx-coordinator)."""
    for fn in of_type(template["Resources"], "AWS::Serverless::Function").values():
        if fn.get("Metadata", {}).get("BuildProperties", {}).get("Binary") == binary:
            props = function_props(template, fn)
            yield props, props.get("Environment", {}).get("Variables", {})


def check_horizons(template, errors):
    """The transaction protocol's time relations (issue 8), checked where both sides are
    known: the idempotency horizon covers every redelivery (queue and redrive retention),
    and the sweeper's stale threshold exceeds the gap between two deliveries."""
    resources = template["Resources"]
    queues = of_type(resources, "AWS::SQS::Queue")
    longest_gap, longest_retention = 0, 0
    for props, env in tx_env(template, "tx-coordinator"):
        retain = int(env.get("TX_RETAIN_SECONDS", 1296000))
        horizon = int(env.get("TX_REDELIVERY_HORIZON_SECONDS", 1209600))
        if retain < horizon:
            errors.append(f"tx-coordinator: TX_RETAIN_SECONDS {retain} < TX_REDELIVERY_HORIZON_SECONDS {horizon}")
        for kind, ev in event_sources(props):
            if kind != "SQS":
                continue
            q = queues.get(ref_name(ev.get("Queue")), {}).get("Properties", {})
            redrive = ref_name(q.get("RedrivePolicy", {}).get("deadLetterTargetArn"))
            for queue in [q, queues.get(redrive, {}).get("Properties", {})]:
                longest_retention = max(longest_retention, int(queue.get("MessageRetentionPeriod", 345600)))
            longest_gap = max(longest_gap, int(q.get("VisibilityTimeout", 30)) + int(props.get("Timeout", 3)))
        if longest_retention > horizon:
            errors.append(f"tx-coordinator: a TX queue keeps messages {longest_retention} s, "
                          f"longer than TX_REDELIVERY_HORIZON_SECONDS {horizon}")
    for _, env in tx_env(template, "tx-sweeper"):
        stale = int(env.get("TX_STALE_AFTER_SECONDS", 900))
        gap = int(env.get("TX_REDELIVERY_GAP_SECONDS", 420))
        if stale <= gap:
            errors.append(f"tx-sweeper: TX_STALE_AFTER_SECONDS {stale} <= TX_REDELIVERY_GAP_SECONDS {gap}")
        if gap < longest_gap:
            errors.append(f"tx-sweeper: TX_REDELIVERY_GAP_SECONDS {gap} < the TX queue's visibility "
                          f"timeout + the coordinator's timeout ({longest_gap} s)")


def check_readme(resources, readme, errors):
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    # A capitalised word ending like a resource, not an IAM action (`dynamodb:DescribeStream`).
    pattern = re.compile(r"(?<![:\w])([A-Z][A-Za-z0-9]*(?:%s))\b" % "|".join(README_SUFFIXES))
    for name in sorted(set(pattern.findall(text))):
        if name not in resources and name not in README_SUFFIXES:
            errors.append(f"README names {name}, which template.yaml does not declare")
    for name in sorted(of_type(resources, "AWS::CloudWatch::Alarm")):
        if f"`{name}`" not in text:
            errors.append(f"alarm {name} has no runbook entry in the README (Operate)")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    template_path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "template.yaml")
    readme = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, "README.md")
    template = load(template_path)
    errors = []
    check_tables(template["Resources"], errors)
    check_functions(template, root, errors)
    check_policies(template["Resources"], errors)
    check_alarms(template, errors)
    check_sources(template, errors)
    check_horizons(template, errors)
    check_readme(template["Resources"], readme, errors)
    for e in errors:
        print(f"template-check: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print("template-check: tables retained and recoverable, arm64 workspace binaries, "
          "no wildcard policies, an alarm per failure path, README names exist")


if __name__ == "__main__":
    main()
