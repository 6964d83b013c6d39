#!/usr/bin/env bash
# Validate template.yaml offline with cfn-lint (SAM transform included), and prove the check
# has teeth: a deliberately broken copy must be rejected.
set -euo pipefail
cd "$(dirname "$0")/.."

cfn-lint template.yaml
echo "template-check: template.yaml is valid"

broken=$(mktemp --suffix=.yaml)
trap 'rm -f "$broken"' EXIT
sed 's/Runtime: provided.al2023/Runtime: provided.al2099/' template.yaml >"$broken"
grep -q provided.al2099 "$broken"
if cfn-lint "$broken" >/dev/null 2>&1; then
  echo "template-check: a template with an invalid runtime passed cfn-lint: the check is broken" >&2
  exit 1
fi
sed 's/Type: Kinesis$/Type: Kinesys/' template.yaml >"$broken"
grep -q 'Type: Kinesys' "$broken"
if cfn-lint "$broken" >/dev/null 2>&1; then
  echo "template-check: a template with an invalid event type passed cfn-lint" >&2
  exit 1
fi
echo "template-check: broken templates are rejected"
