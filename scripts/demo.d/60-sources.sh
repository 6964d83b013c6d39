# Demo step for the sources (sourced by the demo script, which provides `invoke`, `show` and
# `ops`): KPL-aggregated Kinesis records and an SQS FIFO batch. Fixtures: events/ (the
# aggregates made by the `aws-kinesis-agg` package from PyPI, scripts/kpl-events.py).

echo
echo "== ratchet-writer: a Kinesis batch of 3 records: two KPL aggregates (4 and 3 user records)"
echo "   and one plain record. Each user record is applied on its own (its sub-sequence number"
echo "   in its position); expect no batchItemFailures, records=8 in the summary, and"
echo "   User#7/Movie#K Rating 4, User#7/Movie#N, User#8/Movie#L, User#8/Movie#M deleted"
invoke ratchet-writer events/ratchet-kinesis-aggregated.json
ops show RatchetTable | grep -E 'PK=User#[78] ' || true

echo
echo "== ratchet-writer: aggregates that cannot be expanded are dead-lettered whole"
echo "   a valid aggregate (2 puts for User#9 and one user record that is not JSON), one with a"
echo "   flipped MD5 byte, one with a truncated protobuf, one naming a partition key outside its"
echo "   table. Expect no batchItemFailures; User#9/Movie#P and Movie#Q applied; one bad_json"
echo "   dead letter for the user record (id …:2) and three bad_aggregate dead letters"
invoke ratchet-writer events/ratchet-kinesis-aggregated-malformed.json
ops show RatchetTable | grep -E 'PK=User#9 ' || true
ops dead-letters list --table DeadLetterTable --function ratchet-writer 2>/dev/null \
  | grep -E '"bad_aggregate"|:2","' \
  | python3 -c 'import json,sys
for line in sys.stdin:
    l = json.loads(line)
    print("   %s  %s: %s" % (l["id"].rsplit("|", 1)[-1], l["reason"]["code"], l["reason"]["message"]))'

echo
echo "== tx-coordinator: an SQS FIFO batch, two message groups interleaved (ann, dan)"
echo "   ann: 60 to ben, 50 to cat, 10 to ben; dan: 20 to eve, 40 to eve. Each group applies in"
echo "   order, so each group's second transfer finds too little money and rolls back."
echo "   Expect no batchItemFailures; ann 30, ben 70, cat 0, dan 30, eve 20"
ops tx seed AccountsTable ann=100 ben=0 cat=0 dan=50 eve=0
invoke tx-coordinator events/tx-fifo.json
ops show AccountsTable | grep -E 'PK=(ann|ben|cat|dan|eve)( |$)' || true
for tx in fifo-ann-1 fifo-ann-2 fifo-ann-3 fifo-dan-1 fifo-dan-2; do
  ops tx status "$tx" 2>&1 | sed 's/^/   /'
done
