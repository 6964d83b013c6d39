#!/usr/bin/env bash
# Benchmarks against DynamoDB Local (started by the benchmark itself unless
# AWS_ENDPOINT_URL_DYNAMODB is set). Prints figures; asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/tools.sh
cargo build --quiet --release -p ops
for bench in ${BENCHES:-ratchet counter txn}; do
  echo
  ./target/release/ops bench "$bench"
done
