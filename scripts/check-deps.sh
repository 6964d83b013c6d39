#!/usr/bin/env bash
# What cargo-deny cannot say (deny.toml bans the SDK's legacy HTTP/TLS stack, `make deny`): the
# Lambda binaries do not link the YAML parser or the test support crates, and each optional
# client of the library crates comes only with its feature (deny checks all features at once).
set -euo pipefail
cd "$(dirname "$0")/.."

fail=0

for fn in functions/*/; do
  pkg=$(basename "$fn")
  tree=$(cargo tree -q -e normal -p "$pkg" --prefix none)
  for banned in serde_yaml_ng dev-testing dynamo-provision; do
    if grep -q "^$banned " <<<"$tree"; then
      echo "check-deps: the Lambda binary $pkg links $banned" >&2
      fail=1
    fi
  done
done
# A user of the library crates gets only what they ask for: no OpenTelemetry without the edge's
# `otel` feature, no SQS client without `sqs`, no DynamoDB Streams client without `journal`.
core=$(cargo tree -q -e normal -p dynamodb-exactly-once --prefix none)
if grep -q "^aws-sdk-dynamodbstreams " <<<"$core"; then
  echo "check-deps: dynamodb-exactly-once links aws-sdk-dynamodbstreams without its \`journal\` feature" >&2
  fail=1
fi
edge=$(cargo tree -q -e normal -p dynamodb-exactly-once-lambda --prefix none)
for optional in opentelemetry aws-sdk-sqs reqwest aws-sdk-dynamodbstreams; do
  if grep -q "^$optional " <<<"$edge"; then
    echo "check-deps: dynamodb-exactly-once-lambda links $optional without asking for a feature" >&2
    fail=1
  fi
done
if [ "$fail" -ne 0 ]; then exit 1; fi
echo "check-deps: no YAML or test code in the Lambda binaries;" \
  "no OpenTelemetry, SQS or DynamoDB Streams client in the library crates without their features"
