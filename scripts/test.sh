#!/usr/bin/env bash
# The whole test suite: formatting, lints, the SAM templates, the docs, unit and integration
# tests. It starts one DynamoDB Local for the tests (unless AWS_ENDPOINT_URL_DYNAMODB points
# at one) and stops it at exit. Deny, the book as a website, the README's crate, each feature
# and the MSRV are CI's second script (.ci/extra).
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean CI clone builds everything once: incremental compilation only adds work there.
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"; fi

bash scripts/tools.sh
mkdir -p target
# The template checks (Python, cfn-lint) run beside the compilation; their result is read
# before the tests.
bash scripts/check-template.sh >target/template-check.log 2>&1 &
template_pid=$!
echo "== cargo fmt --check"
cargo fmt --all -- --check
# --all-features: the optional parts too (the Lambda crate's `sqs` dead-letter sink and its
# example), in every build below, so that each reuses the same compiled crates.
echo "== cargo clippy -D warnings"
cargo clippy --workspace --all-targets --all-features -- -D warnings
echo "== dependencies"
bash scripts/check-deps.sh
echo "== docs (rustdoc warnings are errors)"
# The library crates (their pages are what users read; the binaries' docs are their READMEs), as
# rustdoc JSON (its lints are the HTML run's; public-api.py reads it). scripts/lib/rustdoc-json
# allows JSON on the stable toolchain for rustdoc alone, so dependencies keep their builds.
RUSTDOC="$PWD/scripts/lib/rustdoc-json" RUSTDOCFLAGS="-D warnings -Z unstable-options --output-format json" \
  cargo doc --no-deps --all-features --quiet \
  -p dynamodb-exactly-once -p dynamodb-exactly-once-lambda -p dev-testing -p dynamo-provision
echo "== public API (api/*.txt)"
python3 scripts/public-api.py
echo "== template"
template_ok=0
wait "$template_pid" || template_ok=$?
cat target/template-check.log
[ "$template_ok" -eq 0 ] || { echo "template checks failed"; exit 1; }
echo "== docs book"
python3 scripts/check-docs.py
# Every relative link and #anchor of the Markdown, as GitHub shows it (lychee.toml; the book's
# site: make book).
git ls-files --cached --others --exclude-standard '*.md' | lychee --files-from -
echo "== import cycles"
python3 scripts/check-cycles.py shared/*/src functions/*/src ops/src
echo "== tests"
# One DynamoDB Local for every test process (tests create their tables under unique prefixes),
# instead of one per test binary. It slows as tables and streams accumulate, so the checkers'
# phase below gets a fresh one.
. scripts/lib/dynamodb-local.sh
own_ddb=0
if [ -z "${AWS_ENDPOINT_URL_DYNAMODB:-}" ]; then
  own_ddb=1
  trap '[ -n "${DYNAMODB_LOCAL_PID:-}" ] && kill "$DYNAMODB_LOCAL_PID" 2>/dev/null || true' EXIT
  start_dynamodb_local target/dynamodb-local/tests.log
fi
# The long randomized and load tests at the share of the budget CI gives them (the full runs:
# `make tx-check`, 10,000 schedules; `make counter-check`, 100; TXN_CONTENTION_TRANSFERS=1000
# for the contention test). The transaction checker's schedules grew (large items, five number
# spellings, the previous release's locks): 60 of them ran in about half a minute, 45 leave the
# suite room under its 8 minutes.
export TX_CHECK_SCHEDULES="${TX_CHECK_SCHEDULES:-45}"
export COUNTER_MAPPING_CHECK_SCHEDULES="${COUNTER_MAPPING_CHECK_SCHEDULES:-1}"
export TXN_CONTENTION_TRANSFERS="${TXN_CONTENTION_TRANSFERS:-200}"
# Unit and integration tests: cargo-nextest runs every test in its own process, several at a
# time across test binaries; doctests (which nextest does not run) after.
# The transaction checker runs after the others, alone: beside them on 2 cores its schedules
# starve (their timeouts fire, attempts restart) and its time varied from 138 to 222 s for 300
# schedules; alone it takes about a minute.
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --all-features --no-tests=pass --test-threads "${TEST_THREADS:-4}" \
    --failure-output final --no-fail-fast -E 'not test(/^(txn::check|counter::journal::mapping_check)::/)' \
    2>&1 | tee target/test-output.log
  # The journal checker's schedules mostly wait on calls: it runs beside the transaction checker.
  if [ "$own_ddb" -eq 1 ]; then
    kill "$DYNAMODB_LOCAL_PID" 2>/dev/null || true
    start_dynamodb_local target/dynamodb-local/checkers.log
  fi
  cargo nextest run --workspace --all-features --no-tests=pass \
    --failure-output final -E 'test(/^(txn::check|counter::journal::mapping_check)::/)' 2>&1 | tee -a target/test-output.log
  # The README's "Use the library": its dependency lines resolve with one HTTP/TLS stack, and
  # its code (the workspace's quickstart example, character for character) runs as shown.
  # `make readme-check` builds and runs it as a new crate outside the workspace: the
  # dependencies the workspace builds with more features are built again for it, about a
  # minute beside the checkers, which `make test` has no room for.
  echo "== the README's quickstart"
  bash scripts/readme-check.sh --example
  cargo test --workspace --all-features --doc 2>&1 | tee -a target/test-output.log
else
  cargo test --workspace --all-features 2>&1 | tee target/test-output.log
fi
# One closing line for the whole suite.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1) } }
     /Summary \[/ { for (i = 1; i <= NF; i++) { if ($(i) ~ /^passed/) p += $(i-1); if ($(i) ~ /^failed/) f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' target/test-output.log
