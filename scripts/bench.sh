#!/usr/bin/env bash
# Benchmarks against one DynamoDB Local (started here unless AWS_ENDPOINT_URL_DYNAMODB is set).
# Prints figures; asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/tools.sh
cargo build --quiet --release -p dev-bench
# The Python peer of `bench idempotency` and `bench processor`: Powertools for AWS Lambda in a venv of its own.
if [ -z "${POWERTOOLS_PYTHON:-}" ]; then
  if [ ! -x .tools/powertools/bin/python ]; then
    python3 -m venv .tools/powertools && .tools/powertools/bin/pip install --quiet aws-lambda-powertools boto3 \
      || echo "bench: Powertools could not be installed; its rows are skipped"
  fi
  [ -x .tools/powertools/bin/python ] && export POWERTOOLS_PYTHON=$ROOT/.tools/powertools/bin/python
fi

if [ -z "${AWS_ENDPOINT_URL_DYNAMODB:-}" ]; then
  . scripts/lib/dynamodb-local.sh
  start_dynamodb_local .demo/dynamodb-bench.log
  # The emulator's CPU per transfer, printed beside the client's by `bench txn`.
  export BENCH_DYNAMODB_PID=$DYNAMODB_LOCAL_PID
  trap 'kill "$DYNAMODB_LOCAL_PID" 2>/dev/null || true' EXIT
fi
# Dummy credentials for a loopback endpoint (the hosts `dev_testing::is_local` accepts);
# a region's endpoint (`BENCHES=txn` against DynamoDB) signs with the environment's or the
# profile's.
case "$AWS_ENDPOINT_URL_DYNAMODB" in
  http://127.*|http://localhost|http://localhost[:/]*|http://\[::1\]*)
    export AWS_DEFAULT_REGION=${AWS_DEFAULT_REGION:-${AWS_REGION:-us-east-1}} \
      AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-local} AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-local}
    ;;
esac

# What the benches' JSON figures (target/bench/*.json) are dated with; scripts/charts.py draws
# the benchmarks page's charts (docs/charts/*.svg) from them at the end.
export BENCH_DATE=${BENCH_DATE:-$(date -u +%F)}
export BENCH_COMMIT=${BENCH_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
for bench in ${BENCHES:-ratchet counter counter-steady counter-shapes txn lease versioning document idempotency processor sources}; do
  echo
  ./target/release/bench "$bench"
done
echo
python3 scripts/charts.py
