#!/usr/bin/env bash
# Validate every SAM template offline: template.yaml (the demo, all in one), each writer stack
# it composes (stacks/*.yaml), the half they share and nest (stacks/shared/sources.yaml) and
# their packaged variants (make package) with cfn-lint (SAM transform included), the
# CloudFormation Guard rules of stacks/rules.guard (one resource at a time: retained,
# recoverable tables, encryption, arm64, sizes as parameters within Lambda's limits, alarm
# actions, named actions and resources, the sources' and the schedule's settings), then the
# checks of scripts/check_template.py that span resources or templates (workspace binaries,
# policy parameters without wildcards, an alarm per failure path, queues against timeouts,
# horizons, the docs' names and runbook entries) in every configuration of each stack, created
# or existing resources. Prove each has teeth: deliberately broken copies must be rejected,
# each for the reason it was broken.
set -euo pipefail
cd "$(dirname "$0")/.."

# (check_template.py reads the stacks a template nests itself, under the parameters it passes.)
templates=(template.yaml stacks/*.yaml)
nested=(stacks/shared/*.yaml)
# docs/deploy.md's parameter tables are written from the templates.
python3 scripts/param-tables.py --check

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What `make package` writes, from fake binaries (the arm64 build takes minutes): the zips and
# the packaged stacks (code beside, code in S3), linted with the sources in one cfn-lint run.
pkg=$tmp/package
for dir in functions/*/; do
  mkdir -p "$tmp/lambda/$(basename "$dir")"
  printf 'fake\n' >"$tmp/lambda/$(basename "$dir")/bootstrap"
done
python3 scripts/package_templates.py --lambda-dir "$tmp/lambda" --out "$pkg" >/dev/null
packaged=("$pkg"/*.yaml)

# (The packaged stacks differ from the stacks only in what make package rewrites, the same way
# in each: CodeUri, the SAR metadata, the two S3 parameters. One of each kind, with two
# functions, stands for them in the cfn-lint run, which costs ~0.7 s a template; Guard and the
# configurations run on the stacks only, check_template.py --packaged on their code.)
cfn-lint "${templates[@]}" "${nested[@]}" "$pkg/transactions.yaml" "$pkg/transactions.s3.yaml" examples/*/template.yaml
echo "template-check: ${templates[*]}, their packaged variants and examples/*/template.yaml are valid"
python3 scripts/check_guard.py "${templates[@]}" "${nested[@]}"
# (with the docs: README.md and docs/*.md but the lab notes, which name earlier resources)
python3 scripts/check_template.py "${templates[@]}"
python3 scripts/check_template.py --packaged "${packaged[@]}"

count=0

# refused <what> <checker> <expected> <command...>: the command must fail and say <expected>
# (a fixed string), so a copy refused for another reason does not count.
refused() {
  local what=$1 checker=$2 expected=$3
  shift 3
  if "$@" >"$tmp/out" 2>&1; then
    echo "template-check: $what passed the $checker check: the check is broken" >&2
    exit 1
  fi
  if ! grep -qF -- "$expected" "$tmp/out"; then
    echo "template-check: $what was rejected by $checker, but not with '$expected':" >&2
    cat "$tmp/out" >&2
    exit 1
  fi
  count=$((count + 1))
}

# the parameter tables: a hand edit of docs/deploy.md's tables is refused
sed 's/^| `StreamBisectBatchOnFunctionError` | `true` |/| `StreamBisectBatchOnFunctionError` | `false` |/' \
  docs/deploy.md >"$tmp/deploy.md"
refused "a hand-edited parameter table" tables "parameter tables differ from the templates" \
  python3 scripts/param-tables.py --check --page "$tmp/deploy.md"

# the packaged stacks: their code must be the binary's zip with an executable bootstrap
rm "$pkg/tx-sweeper.zip"
refused "a packaged stack without its zip" template "tx-sweeper.zip is not a zip with a bootstrap" \
  python3 scripts/check_template.py --packaged "$pkg/transactions.yaml"
sed 's/CodeKeyPrefix}ratchet-writer.zip/CodeKeyPrefix}ratchet.zip/' "$pkg/ratchet.s3.yaml" >"$pkg/broken.s3.yaml"
refused "a packaged stack naming another key" template "is neither ratchet-writer.zip" \
  python3 scripts/check_template.py --packaged "$pkg/broken.s3.yaml"

# must_fail <what> <checker> <expected> <file> <sed expression>: a copy of the templates and
# docs ($tmp/t<n>, with the workspace linked in: the stacks' CodeUri is the directory above
# them) where the expression changes <file> (`docs`: every doc) must be refused by <checker>:
# cfn-lint (the SAM transform runs) or guard on that file, or template: check_template.py in
# the copy, on all templates and docs (a stack checked as its parents nest it). The copies are
# checked after the list, one run of each checker for all of its copies.
cases=()
must_fail() {
  local what=$1 checker=$2 expected=$3 file=$4 expr=$5 dir=$tmp/t${#cases[@]} files f changed=0
  files=("$file")
  [ "$file" = docs ] && files=(README.md docs/*.md)
  mkdir -p "$dir"
  cp -r template.yaml stacks README.md docs "$dir"
  ln -s "$PWD/Cargo.toml" "$PWD/functions" "$dir"
  for f in "${files[@]}"; do
    sed -i "$expr" "$dir/$f"
    cmp -s "$f" "$dir/$f" || changed=1
  done
  if [ "$changed" -eq 0 ]; then
    echo "template-check: the mutation for '$what' changed nothing in $file: update check-template.sh" >&2
    exit 1
  fi
  cases+=("$checker|$dir|$file|$expected|$what")
}

# cfn-lint
must_fail "an unknown runtime" cfn-lint "provided.al2099" stacks/ratchet.yaml \
  's/Runtime: provided.al2023/Runtime: provided.al2099/'
must_fail "an unknown resource type" cfn-lint "AWS::DynamoDB::Tables" template.yaml \
  '0,/Type: AWS::DynamoDB::Table$/s//Type: AWS::DynamoDB::Tables/'
must_fail "an unknown event type" cfn-lint "ScheduleV3" stacks/transactions.yaml 's/Type: ScheduleV2$/Type: ScheduleV3/'

# the demo (template.yaml)
must_fail "an x86_64 function" guard "Globals Architectures is not [arm64]" stacks/ratchet.yaml '0,/      - arm64/s//      - x86_64/'
must_fail "a table without Retain" guard "DeletionPolicy is not Retain" template.yaml \
  '0,/    DeletionPolicy: Retain/s///'
must_fail "a table without point-in-time recovery" guard "PointInTimeRecoveryEnabled is not" template.yaml \
  '0,/PointInTimeRecoveryEnabled: !If \[PitrOn, true, false\]/s//PointInTimeRecoveryEnabled: false/'
must_fail "a wildcard action" guard "a wildcard Action" stacks/document.yaml '0,/dynamodb:PutItem/s//dynamodb:*/'
must_fail "a missing iterator-age alarm" template "IteratorAge for RatchetWriterFunction" stacks/shared/sources.yaml \
  's/MetricName: IteratorAge/MetricName: IteratorAges/'
must_fail "an unencrypted queue" guard "SqsManagedSseEnabled is not true" stacks/shared/sources.yaml \
  '0,/SqsManagedSseEnabled: true/s///'
must_fail "a missing nested stack" template "does not exist" template.yaml \
  's#Location: stacks/ratchet.yaml#Location: stacks/ratchett.yaml#'
must_fail "a writer stack the demo leaves out" template "workspace binary document-writer" \
  template.yaml 's#Location: stacks/document.yaml#Location: stacks/ratchet.yaml#'

# the writer stacks, with the resources they create and with existing ones
must_fail "a created table without Retain" guard "UpdateReplacePolicy is not Retain" \
  stacks/ratchet.yaml '0,/    UpdateReplacePolicy: Retain/s///'
must_fail "a created table without deletion protection" guard "DeletionProtectionEnabled is not" \
  stacks/transactions.yaml '0,/DeletionProtectionEnabled: !If \[DeletionProtectionOn, true, false\]/s//DeletionProtectionEnabled: false/'
must_fail "a wildcard resource" guard "a wildcard Resource" stacks/ratchet.yaml \
  's/- !GetAtt RatchetTable.Arn/- "*"/'
must_fail "a table parameter that lets a wildcard in" template "parameter TableName names a policy's resource" \
  stacks/document.yaml '0,/AllowedPattern: "\^\$|\^\[A-Za-z0-9_.-\]{3,255}\$"/s//AllowedPattern: ".*"/'
must_fail "a dead-letter queue parameter that lets a wildcard in" template \
  "parameter DeadLetterQueueArn names a policy's resource" stacks/counter.yaml \
  '/^  DeadLetterQueueArn:/,/AllowedPattern:/s/AllowedPattern: .*/AllowedPattern: ".*"/'
must_fail "a wildcard resource in the sources policy" guard "a wildcard Resource" stacks/shared/sources.yaml \
  's/Resource: !If \[HasQueueArn, !Ref QueueArn, !GetAtt Queue.Arn\]/Resource: !If [HasQueueArn, !Ref QueueArn, "*"]/'
must_fail "a queue parameter, passed to Sources, that lets a wildcard in" template \
  "parameter QueueArn names a policy's resource" stacks/ratchet.yaml \
  '/^  QueueArn:/,/AllowedPattern:/s/AllowedPattern: .*/AllowedPattern: ".*"/'
must_fail "a role with an AWS managed policy" guard "an AWS managed policy" stacks/ratchet.yaml \
  's/ManagedPolicyArns: !If \[SendTraces, \[!Ref TracesPolicy\], !Ref AWS::NoValue\]/ManagedPolicyArns: !If [SendTraces, [!Ref TracesPolicy, !Sub "arn:${AWS::Partition}:iam::aws:policy\/AWSXrayWriteOnlyAccess"], !Ref AWS::NoValue]/'
must_fail "a function not built by cargo-lambda" guard "BuildMethod is not rust-cargolambda" \
  stacks/document.yaml 's/BuildMethod: rust-cargolambda/BuildMethod: makefile/'
must_fail "a function with a runtime of its own" guard "its own Runtime" stacks/transactions.yaml \
  's/^      Role: !GetAtt TxSweeperRole.Arn$/      Role: !GetAtt TxSweeperRole.Arn\n      Runtime: provided.al2/'
must_fail "an unencrypted stream" guard "no StreamEncryption with KMS" stacks/shared/sources.yaml \
  '0,/        EncryptionType: KMS/s//        EncryptionType: NONE/'
must_fail "an alarm notifying always" guard "not the optional AlarmTopicArn" stacks/transactions.yaml \
  '0,/OKActions: !If \[HasAlarmTopic, \[!Ref AlarmTopicArn\], !Ref AWS::NoValue\]/s//OKActions: [!Ref AlarmTopicArn]/'
must_fail "a role policy with a service-wide action" guard "a wildcard Action" stacks/shared/sources.yaml \
  's/                - kinesis:GetRecords/                - kinesis:*/'
must_fail "a CodeUri outside the workspace" template "is not the cargo workspace" stacks/document.yaml \
  's/^    CodeUri: \.\.$/    CodeUri: ./'
must_fail "a missing redrive-queue alarm" template "ApproximateNumberOfMessagesVisible for TxQueueRedrive" \
  stacks/transactions.yaml 's/!GetAtt TxQueueRedrive.QueueName/!GetAtt TxQueue.QueueName/'
must_fail "an existing queue without its redrive-queue alarm" template "for existing-queue-redrive" \
  stacks/shared/sources.yaml 's/!Split \[":", !Ref QueueRedriveArn\]/!Split [":", !Ref QueueArn]/'
must_fail "a fixed memory size" guard "function: MemorySize is not a parameter <X>MemorySize" \
  stacks/ratchet.yaml 's/^    MemorySize: !Ref MemorySize$/    MemorySize: 256/'
must_fail "a timeout a created queue cannot hold" template "queue Sources/Queue: VisibilityTimeout 360 < 6 x DocumentWriterFunction's timeout 120" \
  stacks/document.yaml '/^  Timeout:/,/MaxValue:/s/MaxValue: 60/MaxValue: 120/'
must_fail "a timeout beyond Lambda's" guard "a Timeout above Lambda's 900 s" \
  stacks/counter.yaml '/^  RollupTimeout:/,/MaxValue:/s/MaxValue: 900/MaxValue: 1000/'
must_fail "a coordinator timeout the TX queue cannot hold at its shortest visibility" template \
  "queue TxQueue: VisibilityTimeout 360 < 6 x TxCoordinatorFunction's timeout 90" stacks/transactions.yaml \
  '/^  Timeout:/,/MaxValue:/s/MaxValue: 60/MaxValue: 90/; /^  QueueVisibilityTimeoutSeconds:/,/Default:/s/Default: 360/Default: 600/'
must_fail "a source without partial batch responses" guard "without FunctionResponseTypes" \
  stacks/shared/sources.yaml '/FunctionResponseTypes:/,+1d'
must_fail "a stream source without a failure destination" guard "without an on-failure destination" \
  stacks/shared/sources.yaml '/^      DestinationConfig:/,+2d'
must_fail "a Kafka source without partial batch responses" guard \
  "a Kafka source without FunctionResponseTypes" \
  stacks/shared/sources.yaml '/^  KafkaSource:/,/^  KafkaFailures:/{/FunctionResponseTypes:/,+1d}'
must_fail "a queue source without a concurrency cap" guard "without ScalingConfig MaximumConcurrency" \
  stacks/transactions.yaml '/^        MaximumConcurrency:/d'
must_fail "a roll-up event without partial batch responses" guard \
  "an event without FunctionResponseTypes" stacks/counter.yaml \
  '/^  CounterRollupFunction:/,/^  [A-Z]/{/FunctionResponseTypes:/,+1d}'
must_fail "a sweeper running twice at once" guard "ReservedConcurrentExecutions is not 1" \
  stacks/transactions.yaml 's/ReservedConcurrentExecutions: 1$/ReservedConcurrentExecutions: 2/'
must_fail "a role with NotAction" guard "NotAction or NotResource" stacks/ratchet.yaml \
  '0,/^                Action:$/s//                NotAction:/'
must_fail "a Kafka source without its lag alarm" template "a Kafka consumer falling behind" \
  stacks/shared/sources.yaml 's/MetricName: OffsetLag$/MetricName: OffsetLagged/'
must_fail "an unknown function binary" template "'tx-sweep' is not a binary" stacks/transactions.yaml \
  's/Binary: tx-sweeper/Binary: tx-sweep/'
must_fail "a sweeper that retries" guard "schedule retries" stacks/transactions.yaml \
  's/MaximumRetryAttempts: 0$/MaximumRetryAttempts: 2/'
must_fail "a TX retention shorter than the redelivery horizon" template "TX_RETAIN_SECONDS 604800 <" \
  stacks/transactions.yaml '/^  RetainSeconds:/,/Default:/s/Default: 1296000/Default: 604800/'
must_fail "a sweeper stale threshold within a redelivery gap" template "TX_STALE_AFTER_SECONDS 420 <=" \
  stacks/transactions.yaml '/^  StaleAfterSeconds:/,/Default:/s/Default: 900/Default: 420/'
must_fail "a redelivery gap shorter than visibility + timeout" template "shorter than the visibility timeout 360" \
  stacks/transactions.yaml 's/"360": {Seconds: 420}/"360": {Seconds: 300}/'
must_fail "a sweeper lag alarm below its stale threshold" template "is not above TX_STALE_AFTER_SECONDS" \
  stacks/transactions.yaml '/^  SweeperLagAlarmSeconds:/,/Default:/s/Default: 1800/Default: 600/'
must_fail "a roll-up without its lost-records alarm" template "ApproximateNumberOfMessagesVisible for CounterRollupStreamFailures" \
  stacks/counter.yaml 's/Value: !GetAtt CounterRollupStreamFailures.QueueName$/Value: other-queue/'
must_fail "a roll-up without its lag alarm" template "IteratorAge for CounterRollupFunction" \
  stacks/counter.yaml '/^  CounterRollupIteratorAgeAlarm:/,/^  [A-Z]/s/MetricName: IteratorAge$/MetricName: IteratorAges/'
must_fail "a roll-up reading other counter settings" template "differ in COUNTER_ATTRIBUTE_PREFIX" \
  stacks/counter.yaml '/^  CounterRollupFunction:/,/Events:/s/COUNTER_ATTRIBUTE_PREFIX: !Ref AttributePrefix/COUNTER_ATTRIBUTE_PREFIX: other_/'
must_fail "a journal no roll-up reads" template "no counter-rollup reads it" \
  stacks/counter.yaml '/^  CounterRollupFunction:/,/Events:/s/COUNTER_JOURNAL_TABLE: !Ref CounterJournalTable/COUNTER_JOURNAL_TABLE: other-journal/'

# the docs (README.md and docs/*.md: every file that holds the text)
must_fail "docs naming a missing alarm" template "name NoSuchAlarm" docs \
  's/^# dynamodb-exactly-once/# dynamodb-exactly-once (see NoSuchAlarm)/'
must_fail "docs without an alarm's runbook" template "TxSweeperNotRunningAlarm has no runbook entry" docs \
  's/`TxSweeperNotRunningAlarm`/TxSweeperNotRunning/g'

# One run of each checker for all of its copies; then each copy must have been refused for its
# reason (in what the checker says about that copy: cfn-lint prints a finding's message, then
# file:line:column; Guard a line per finding with the file; check_template.py a line per
# finding after the copy's directory).
lint=() guard=() trees=()
for case in "${cases[@]}"; do
  IFS='|' read -r checker dir file _ <<<"$case"
  case $checker in
    cfn-lint) lint+=("$dir/$file") ;;
    guard) guard+=("$dir/$file") ;;
    template) trees+=("$dir") ;;
  esac
done
cfn-lint "${lint[@]}" >"$tmp/cfn-lint" 2>&1 || true
python3 scripts/check_guard.py "${guard[@]}" >"$tmp/guard" 2>&1 || true
python3 scripts/check_template.py "${trees[@]}" "${templates[@]}" >"$tmp/template" 2>&1 || true
for case in "${cases[@]}"; do
  IFS='|' read -r checker dir file expected what <<<"$case"
  key="$dir/" before=0
  [ "$checker" = template ] && key="$dir: "
  [ "$checker" = cfn-lint ] && before=1
  if ! grep -B"$before" -F -- "$key" "$tmp/$checker" | grep -qF -- "$expected"; then
    echo "template-check: $what ($dir/$file) was not refused by $checker with '$expected':" >&2
    grep -F -- "$key" "$tmp/$checker" >&2 || cat "$tmp/$checker" >&2
    exit 1
  fi
  count=$((count + 1))
done
echo "template-check: $count broken copies rejected, each for its reason"
