#!/usr/bin/env bash
# The whole test suite: formatting, lints, the SAM template, unit and integration tests.
# Integration tests start DynamoDB Local themselves (one per test binary, on a free port)
# unless AWS_ENDPOINT_URL_DYNAMODB points at one.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/tools.sh
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== template"
bash scripts/check-template.sh
echo "== tests"
cargo test --workspace --all-features
