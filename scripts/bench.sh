#!/usr/bin/env bash
# Benchmarks against one DynamoDB Local (started here unless AWS_ENDPOINT_URL_DYNAMODB is set).
# Prints figures; asserts nothing about time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/tools.sh
cargo build --quiet --release -p dev-bench
# A venv of the bench's own: Powertools for AWS Lambda, the Python peer of `bench idempotency`
# and `bench processor`, and matplotlib for scripts/charts.py.
venv=.tools/bench
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import aws_lambda_powertools, boto3, matplotlib' 2>/dev/null; then
  python3 -m venv "$venv" && "$venv/bin/pip" install --quiet aws-lambda-powertools==3.37.0 boto3==1.43.11 matplotlib==3.10.7
fi
export POWERTOOLS_PYTHON=${POWERTOOLS_PYTHON:-$ROOT/$venv/bin/python}

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
"$venv/bin/python" scripts/charts.py
