#!/usr/bin/env python3
"""Run the CloudFormation Guard rules of stacks/rules.guard on SAM templates (run by
scripts/check-template.sh in `make test`).

Usage: check_guard.py TEMPLATE...
The rules run in process through the `cfn-guard-rs` package (PyPI; CloudFormation Guard's Rust
engine with Python bindings: `make tools` installs it), on each template as CloudFormation
reads it (`!Ref x` is `{"Ref": "x"}`). Exit status 1 with one line per violation: the
template, the rule, the resource path and the rule's message.
"""

import dataclasses
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_template import load  # noqa: E402 (the YAML loader that reads CloudFormation tags)

try:
    from cfn_guard_rs import run_checks
except ImportError:
    sys.exit("check_guard: the cfn-guard-rs package is missing: run `make tools`")

RULES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "stacks", "rules.guard")


def failures(node, found):
    """(resource path, message) of every failed clause under a report node."""
    if dataclasses.is_dataclass(node):
        messages = getattr(node, "messages", None)
        status = getattr(node, "status", None)
        context = getattr(node, "context", "") or ""
        message = getattr(messages, "custom_message", None) if messages else None
        if message and status != "PASS":
            path = re.search(r"/Resources/[^/\s]+|/Globals/[^/\s]+", str(node))
            found.add(((path.group(0) if path else context), message.strip()))
        for f in dataclasses.fields(node):
            failures(getattr(node, f.name), found)
    elif isinstance(node, (list, tuple)):
        for item in node:
            failures(item, found)
    return found


def main(paths):
    errors = []
    with open(RULES, encoding="utf-8") as f:
        rules = f.read()
    for path in paths:
        try:
            report = run_checks(load(path), rules)
        except ValueError:  # cfn-guard-rs 0.3.3 cuts a long failure report short
            errors.append(f"{path}: a rule failed (its report is unreadable)")
            continue
        for clause in report.not_compliant:
            rule = clause.Rule.name if clause.Rule else "?"
            found = failures(clause, set()) or {("", "failed")}
            for where, message in sorted(found):
                where = f" {where}" if where else ""
                errors.append(f"{path}: rules.guard {rule}{where}: {message}")
    for e in errors:
        print(f"guard-check: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"guard-check: {len(paths)} templates pass stacks/rules.guard")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
