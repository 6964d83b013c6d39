# Demo step for document-writer and the lease lock (sourced by the demo script, which provides
# `invoke`, `show`, `ops` and `say`). Settings: DOCUMENT_* in scripts/demo.env.

dead_letters_of() {
  ops dead-letters list --table DeadLetterTable --function "$1" 2>&1 |
    python3 -c 'import sys, json
for line in sys.stdin:
    try: d = json.loads(line)
    except ValueError: print("   " + line.rstrip()); continue
    print("   %-22s %-22s %s" % (d["position"]["id"], d["reason"]["code"], d["reason"]["message"][:80]))'
}

say "document-writer: list and set updates in place, version-guarded replaces"
echo "== a batch over two documents (SQS). user#1's records apply in order, user#2's concurrently:"
echo "   user#1: replace creates it (doc_version 1); carol appended twice; list_remove takes the FIRST"
echo "   carol only (guard: version read AND friends[i] = carol); profile.tags becomes a string set;"
echo "   erin is absent; an empty set_add writes nothing (unchanged)."
echo "   user#2: scores {10, 20} (20 and 20.0 are one element), 10 removed, a unique inbox append."
echo "   expect no batchItemFailures; summary applied=7 absent=1 unchanged=1"
invoke document-writer events/document-sqs-batch.json
show DocumentTable

echo
echo "== a later batch (Kinesis)"
echo "   expect: the second carol removed (applied), then absent; user#2's last score removes the"
echo "   scores attribute itself (no empty set is ever stored); a replace computed from version 0"
echo "   conflicts (user#1 is at version 5); the unique inbox append is a duplicate"
invoke document-writer events/document-kinesis-more.json
show DocumentTable

echo
echo "== malformed records are kept as dead letters with their reason, never retried forever"
echo "   expect no batchItemFailures; user#3 friends [zoe]; eight dead letters: bad JSON, unknown op,"
echo "   a malformed path, a key attribute as path, a protocol attribute as path, a mixed set,"
echo "   a forged protocol attribute, and a set operation on a list (refused by DynamoDB)"
invoke document-writer events/document-sqs-malformed.json
dead_letters_of document-writer

say "the fenced lease lock: shared/dynamodb-exactly-once/examples/lease.rs"
echo "Expect: worker-a acquires (token n) and writes; it pauses past its 1 s lease; worker-b watches"
echo "the lock's record version stay unchanged for a full lease on its own clock, takes over"
echo "(token n+1) and writes; worker-a's late write is Stale in the ratchet (ts = its token) and"
echo "refused by a plain fenced UpdateItem; worker-a's heartbeat reports Lost."
cargo build --quiet -p dynamodb-exactly-once --example lease
"$TARGET/debug/examples/lease"
