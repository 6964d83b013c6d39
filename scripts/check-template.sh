#!/usr/bin/env bash
# Validate template.yaml offline with cfn-lint (SAM transform included), then the operational
# checks of scripts/check_template.py (retained tables, arm64 workspace binaries, no wildcard
# policies, an alarm per failure path, README names), and prove both have teeth: deliberately
# broken copies must be rejected.
set -euo pipefail
cd "$(dirname "$0")/.."

cfn-lint template.yaml
echo "template-check: template.yaml is valid"
python3 scripts/check_template.py template.yaml README.md

broken=$(mktemp --suffix=.yaml)
trap 'rm -f "$broken"' EXIT

# must_fail <what> <checker> <sed expression> [file]: the mutated copy must be rejected.
must_fail() {
  local what=$1 checker=$2 expr=$3 file=${4:-template.yaml}
  sed "$expr" "$file" >"$broken"
  if cmp -s "$file" "$broken"; then
    echo "template-check: the mutation for '$what' changed nothing: update check-template.sh" >&2
    exit 1
  fi
  local ok
  case $checker in
    cfn-lint) cfn-lint "$broken" >/dev/null 2>&1 && ok=1 || ok=0 ;;
    template) python3 scripts/check_template.py "$broken" README.md >/dev/null 2>&1 && ok=1 || ok=0 ;;
    readme) python3 scripts/check_template.py template.yaml "$broken" >/dev/null 2>&1 && ok=1 || ok=0 ;;
  esac
  if [ "$ok" -eq 1 ]; then
    echo "template-check: $what passed the $checker check: the check is broken" >&2
    exit 1
  fi
}

must_fail "an invalid runtime" cfn-lint 's/Runtime: provided.al2023/Runtime: provided.al2099/'
must_fail "an invalid event type" cfn-lint 's/Type: Kinesis$/Type: Kinesys/'
must_fail "an x86_64 function" template '0,/      - arm64/s//      - x86_64/'
must_fail "a table without Retain" template '0,/    DeletionPolicy: Retain/s///'
must_fail "a table without point-in-time recovery" template '0,/PointInTimeRecoveryEnabled: !If \[PitrOn, true, false\]/s//PointInTimeRecoveryEnabled: false/'
must_fail "a wildcard action" template '0,/dynamodb:PutItem/s//dynamodb:*/'
must_fail "a wildcard resource" template '0,/Resource: !GetAtt RatchetTable.Arn/s//Resource: "*"/'
must_fail "a missing iterator-age alarm" template 's/MetricName: IteratorAge/MetricName: IteratorAges/'
must_fail "a missing redrive-queue alarm" template 's/Value: !GetAtt TxQueueRedrive.QueueName/Value: !GetAtt TxQueue.QueueName/'
must_fail "an unknown function binary" template 's/Binary: tx-sweeper/Binary: tx-sweep/'
must_fail "an unencrypted queue" template '0,/SqsManagedSseEnabled: true/s///'
must_fail "a sweeper that retries" template 's/MaximumRetryAttempts: 0/MaximumRetryAttempts: 2/'
must_fail "a TX retention shorter than the redelivery horizon" template '0,/TX_RETAIN_SECONDS: 1296000/s//TX_RETAIN_SECONDS: 604800/'
must_fail "a sweeper stale threshold within a redelivery gap" template 's/TX_STALE_AFTER_SECONDS: 900/TX_STALE_AFTER_SECONDS: 300/'
must_fail "a redelivery gap shorter than visibility + timeout" template 's/TX_REDELIVERY_GAP_SECONDS: 420/TX_REDELIVERY_GAP_SECONDS: 120/'
must_fail "a README naming a missing alarm" readme 's/^# dynamo-stream-writes/# dynamo-stream-writes (see NoSuchAlarm)/' README.md
must_fail "a README without an alarm's runbook" readme 's/`TxSweeperNotRunningAlarm`/TxSweeperNotRunning/' README.md
echo "template-check: broken templates are rejected"
