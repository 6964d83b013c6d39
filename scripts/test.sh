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
cargo clippy --workspace --all-targets -- -D warnings
echo "== dependencies"
bash scripts/check-deps.sh
echo "== docs (rustdoc warnings are errors)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== template"
bash scripts/check-template.sh
echo "== tests"
mkdir -p target
cargo test --workspace 2>&1 | tee target/test-output.log
# One closing line for the whole suite (cargo prints one result line per test binary).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' target/test-output.log
