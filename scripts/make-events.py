#!/usr/bin/env python3
"""Regenerate the sample events in events/ (Kinesis data is base64, so they are generated).

KPL-aggregated Kinesis records are made by the `aws-kinesis-agg` package (the aggregation
format's own Python implementation, from PyPI): when it is not importable, this script creates
a virtual environment under .tools/py-events, installs the pinned versions there and runs
itself again inside it. The generated files are committed: tests never need PyPI.
"""
import base64, hashlib, json, os, subprocess, sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ROOT = os.path.join(REPO, "events")
AGG_PACKAGES = ["aws-kinesis-agg==1.2.3", "six==1.17.0", "protobuf==7.36.2"]


def import_aggregator():
    """aws-kinesis-agg's RecordAggregator and its protobuf messages, from a venv if need be."""
    try:
        from aws_kinesis_agg.aggregator import RecordAggregator
        from aws_kinesis_agg import messages_pb2
        return RecordAggregator, messages_pb2
    except ImportError:
        venv = os.path.abspath(os.path.join(REPO, ".tools", "py-events"))
        python = os.path.join(venv, "bin", "python")
        if os.path.abspath(sys.prefix) == venv:
            raise
        if not os.path.exists(python):
            print("make-events: installing %s into %s" % (" ".join(AGG_PACKAGES), venv), file=sys.stderr)
            subprocess.check_call([sys.executable, "-m", "venv", venv])
            subprocess.check_call([python, "-m", "pip", "install", "-q", *AGG_PACKAGES])
        os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])


RecordAggregator, messages_pb2 = import_aggregator()
STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/RatchetStream"
QUEUE = "arn:aws:sqs:us-east-1:123456789012:RatchetQueue"


def kinesis(bodies, shard="shardId-000000000000", first_seq=49590338271490256608559692538361571095921575989136588800):
    records = []
    for i, body in enumerate(bodies):
        seq = str(first_seq + i)
        data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        records.append({
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": "pk-%d" % i,
                "sequenceNumber": seq,
                "data": base64.b64encode(data.encode()).decode(),
                "approximateArrivalTimestamp": 1721770090.123,
            },
            "eventSource": "aws:kinesis",
            "eventVersion": "1.0",
            "eventID": "%s:%s" % (shard, seq),
            "eventName": "aws:kinesis:record",
            "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
            "awsRegion": "us-east-1",
            "eventSourceARN": STREAM,
        })
    return {"Records": records}


def sqs(bodies, prefix):
    records = []
    for i, body in enumerate(bodies):
        data = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
        records.append({
            "messageId": "%s-%02d" % (prefix, i),
            "receiptHandle": "AQEB-%s-%02d" % (prefix, i),
            "body": data,
            "attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": "1721770090000",
                "SenderId": "AIDAEXAMPLE",
                "ApproximateFirstReceiveTimestamp": "1721770090001",
            },
            "messageAttributes": {},
            "md5OfBody": "",
            "eventSource": "aws:sqs",
            "eventSourceARN": QUEUE,
            "awsRegion": "us-east-1",
        })
    return {"Records": records}


def put(pk, sk, ts, **item):
    return {"op": "put", "key": {"PK": pk, "SK": sk}, "ts": ts, "item": item}


def delete(pk, sk, ts):
    return {"op": "delete", "key": {"PK": pk, "SK": sk}, "ts": ts}


def write(name, event):
    with open(os.path.join(ROOT, name), "w") as f:
        json.dump(event, f, indent=2)
        f.write("\n")


in_order = [
    put("User#1", "Movie#A", 1721770090000, Rating=3),
    put("User#1", "Movie#A", 1721770091000, Rating=4),
    put("User#1", "Movie#A", 1721770092000, Rating=5, Review="great"),
    put("User#1", "Movie#B", 1721770090000, Rating=2),
    put("User#2", "Movie#Z", 1721757800000, Rating=1),
]
out_of_order = [
    put("User#1", "Movie#A", 1721770095000, Rating=1, Review="changed my mind"),
    put("User#1", "Movie#A", 1721770093000, Rating=2),
    delete("User#2", "Movie#Z", 1721757900000),
    put("User#2", "Movie#Z", 1721757850000, Rating=4),
    put("User#3", "Movie#C", 1721770000000, Rating=5),
    put("User#3", "Movie#C", 1721769000000, Rating=1),
]
duplicates = [
    put("User#1", "Movie#B", 1721770099000, Rating=3),
    put("User#1", "Movie#B", 1721770099000, Rating=3),
    put("User#1", "Movie#A", 1721770095000, Rating=1, Review="changed my mind"),
    delete("User#2", "Movie#Z", 1721757900000),
    put("User#2", "Movie#Z", 1721757800000, Rating=1),
]
malformed = [
    put("User#4", "Movie#D", 1721770090000, Rating=4),
    "{this is not json",
    {"op": "upsert", "key": {"PK": "User#4", "SK": "Movie#E"}, "ts": 1721770090000},
    {"op": "put", "key": {"PK": "User#4", "SK": "Movie#F"}, "item": {"Rating": 1}},
    {"op": "put", "key": {"PK": "User#4", "SK": "Movie#G"}, "ts": "yesterday", "item": {"Rating": 1}},
    put("User#4", "Movie#H", 1721770090000, Rating=1, Timestamp=9999999999999),
    put("User#4", "Movie#I", 1721770090000, PK="User#5"),
]

write("ratchet-sqs-in-order.json", sqs(in_order, "in-order"))
write("ratchet-kinesis-in-order.json", kinesis(in_order))
write("ratchet-kinesis-out-of-order.json", kinesis(out_of_order, first_seq=49590338271490256608559692538361571095921575989136589000))
write("ratchet-sqs-out-of-order.json", sqs(out_of_order, "out-of-order"))
write("ratchet-sqs-duplicates.json", sqs(duplicates, "duplicates"))
write("ratchet-kinesis-duplicates.json", kinesis(duplicates, first_seq=49590338271490256608559692538361571095921575989136589100))
write("ratchet-sqs-malformed.json", sqs(malformed, "malformed"))
write("ratchet-kinesis-malformed.json", kinesis(malformed, first_seq=49590338271490256608559692538361571095921575989136589200))

# History mode: a late, a duplicate, an equal-ts rival, a delete and an older put of one key.
history = [
    put("User#4", "Movie#H", 1721770100000, Rating=3),
    put("User#4", "Movie#H", 1721770090000, Rating=1),
    put("User#4", "Movie#H", 1721770100000, Rating=3),
    put("User#4", "Movie#H", 1721770100000, Rating=4),
    delete("User#4", "Movie#H", 1721770110000),
    put("User#4", "Movie#H", 1721770105000, Rating=5),
]
write("ratchet-history-sqs.json", sqs(history, "history"))

# ---------------------------------------------------------------- counter-writer
COUNTER_STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/CounterStream"
COUNTER_QUEUE = "arn:aws:sqs:us-east-1:123456789012:CounterQueue"


def count(pk, sk, key, **add):
    return {"key": {"PK": pk, "SK": sk}, "add": add, "idempotencyKey": key}


def with_arn(event, arn):
    for r in event["Records"]:
        r["eventSourceARN"] = arn
    return event


# Two accounts; acct#42's login event 15.dfc31777 is sent twice by the producer (same key,
# different message ids), and the second batch repeats one key of the first across batches.
counter_batch = [
    count("acct#42", "2024-11-22", "ECloudFrontId/acct42/2024-11-22/15.dfc31777", logins=3, authz=10),
    count("acct#42", "2024-11-22", "ECloudFrontId/acct42/2024-11-22/15.aa01b2c3", logins=1),
    count("acct#42", "2024-11-22", "ECloudFrontId/acct42/2024-11-22/15.dfc31777", logins=3, authz=10),
    count("acct#7", "2024-11-22", "ECloudFrontId/acct7/2024-11-22/09.0badf00d", logins=2, authz=5),
    count("acct#42", "2024-11-22", "ECloudFrontId/acct42/2024-11-22/16.77e1e2e3", authz=4),
]
counter_more = [
    count("acct#42", "2024-11-22", "ECloudFrontId/acct42/2024-11-22/15.aa01b2c3", logins=1),
    count("acct#7", "2024-11-22", "ECloudFrontId/acct7/2024-11-22/10.12345678", logins=1),
    count("acct#42", "2024-11-23", "ECloudFrontId/acct42/2024-11-23/00.feedbeef", logins=1, authz=1),
]
counter_malformed = [
    count("acct#9", "2024-11-22", "ECloudFrontId/acct9/2024-11-22/01.00000001", logins=1),
    "{not json",
    {"key": {"PK": "acct#9", "SK": "2024-11-22"}, "add": {"logins": 1}},
    {"key": {"PK": "acct#9", "SK": "2024-11-22"}, "add": {"logins": "1.5"}, "idempotencyKey": "k-text"},
    {"key": {"PK": "acct#9", "SK": "2024-11-22"}, "add": {"ctr_bucket": 1}, "idempotencyKey": "k-reserved"},
    {"key": {"PK": "acct#9", "SK": "2024-11-22"}, "add": {}, "idempotencyKey": "k-empty"},
]

write("counter-sqs-batch.json", with_arn(sqs(counter_batch, "counter-batch"), COUNTER_QUEUE))
write("counter-kinesis-batch.json", with_arn(kinesis(counter_batch, first_seq=49590338271490256608559692538361571095921575989136590000), COUNTER_STREAM))
write("counter-sqs-more.json", with_arn(sqs(counter_more, "counter-more"), COUNTER_QUEUE))
write("counter-kinesis-more.json", with_arn(kinesis(counter_more, first_seq=49590338271490256608559692538361571095921575989136590100), COUNTER_STREAM))
write("counter-sqs-malformed.json", with_arn(sqs(counter_malformed, "counter-malformed"), COUNTER_QUEUE))
write("counter-kinesis-malformed.json", with_arn(kinesis(counter_malformed, first_seq=49590338271490256608559692538361571095921575989136590200), COUNTER_STREAM))

# ---------------------------------------------------------------- transactions
TX_QUEUE = "arn:aws:sqs:us-east-1:123456789012:TxQueue"


def tx_debit(pk, amount):
    return {"Update": {
        "TableName": "AccountsTable", "Key": {"PK": pk},
        "UpdateExpression": "SET #b = #b - :a", "ConditionExpression": "#b >= :a",
        "ExpressionAttributeNames": {"#b": "balance"}, "ExpressionAttributeValues": {":a": amount}}}


def tx_credit(pk, amount):
    return {"Update": {
        "TableName": "AccountsTable", "Key": {"PK": pk},
        "UpdateExpression": "SET #b = #b + :a",
        "ExpressionAttributeNames": {"#b": "balance"}, "ExpressionAttributeValues": {":a": amount}}}


def tx_transfer(tx_id, source, target, amount):
    return {"txId": tx_id, "requests": [tx_debit(source, amount), tx_credit(target, amount)]}


write("tx-transfer.json", with_arn(sqs([tx_transfer("transfer-0001", "alice", "bob", 30)], "tx-transfer"), TX_QUEUE))
write("tx-overdraft.json", with_arn(sqs([tx_transfer("transfer-0002", "alice", "bob", 500)], "tx-overdraft"), TX_QUEUE))
write("tx-abandon.json", with_arn(sqs([tx_transfer("transfer-0004", "bob", "carol", 20)], "tx-abandon"), TX_QUEUE))
write("tx-malformed.json", with_arn(sqs(["{\"txId\": \"transfer-0003\", \"requests\": ["], "tx-malformed"), TX_QUEUE))
write("tx-sweeper-schedule.json", {
    "version": "0",
    "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
    "detail-type": "Scheduled Event",
    "source": "aws.scheduler",
    "account": "123456789012",
    "time": "2026-11-22T03:30:00Z",
    "region": "us-east-1",
    "resources": ["arn:aws:scheduler:us-east-1:123456789012:schedule/default/TxSweeperSchedule"],
    "detail": {},
})
# counter-rollup: no sample; its events are the journal's stream records as the event source
# mapping sends them (`ops counter stream-events --table CounterJournalTable`).

# ---------------------------------------------------------------- document-writer
DOCUMENT_STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/DocumentStream"
DOCUMENT_QUEUE = "arn:aws:sqs:us-east-1:123456789012:DocumentQueue"


def doc(op, pk, **fields):
    return {"op": op, "key": {"PK": pk, "SK": "profile"}, **fields}


# user#1's records apply in order (one task per item): the replace creates the document, the
# append adds carol twice, the remove takes the first carol; user#2 is written concurrently.
document_batch = [
    doc("replace", "user#1", document={"name": "Ann", "friends": ["bob"], "profile": {"city": "Lyon"}}, expectedVersion=0),
    doc("list_append", "user#1", path="friends", values=["carol", "dave", "carol"]),
    doc("list_remove", "user#1", path="friends", value="carol"),
    doc("set_add", "user#1", path="profile.tags", values=["rust", "aws", "rust"]),
    doc("set_add", "user#2", path="scores", values=[10, 20, 20.0]),
    doc("set_remove", "user#2", path="scores", values=[10]),
    doc("list_append", "user#2", path="inbox", values=[{"from": "ann", "text": "hi"}], unique=True),
    doc("list_remove", "user#1", path="friends", value="erin"),
    doc("set_add", "user#1", path="profile.tags", values=[]),
]
# A later batch: the second carol goes, erin is absent, the last score removes the set
# attribute, a replace based on version 0 conflicts, the unique append is a duplicate.
document_more = [
    doc("list_remove", "user#1", path="friends", value="carol"),
    doc("list_remove", "user#1", path="friends", value="carol"),
    doc("set_remove", "user#2", path="scores", values=[20]),
    doc("replace", "user#1", document={"name": "Ann B."}, expectedVersion=0),
    doc("list_append", "user#2", path="inbox", values=[{"from": "ann", "text": "hi"}], unique=True),
]
document_malformed = [
    doc("list_append", "user#3", path="friends", values=["zoe"]),
    "{not json",
    doc("pop", "user#3", path="friends"),
    doc("list_append", "user#3", path="friends..best", values=["x"]),
    doc("set_add", "user#3", path="SK", values=["x"]),
    doc("list_remove", "user#3", path="doc_version", value=1),
    doc("set_add", "user#3", path="tags", values=["a", 1]),
    doc("replace", "user#3", document={"doc_op0": "forged"}),
    doc("set_add", "user#3", path="friends", values=["x"]),
]

write("document-sqs-batch.json", with_arn(sqs(document_batch, "document-batch"), DOCUMENT_QUEUE))
write("document-kinesis-batch.json", with_arn(kinesis(document_batch, first_seq=49590338271490256608559692538361571095921575989136591000), DOCUMENT_STREAM))
write("document-sqs-more.json", with_arn(sqs(document_more, "document-more"), DOCUMENT_QUEUE))
write("document-kinesis-more.json", with_arn(kinesis(document_more, first_seq=49590338271490256608559692538361571095921575989136591100), DOCUMENT_STREAM))
write("document-sqs-malformed.json", with_arn(sqs(document_malformed, "document-malformed"), DOCUMENT_QUEUE))
write("document-kinesis-malformed.json", with_arn(kinesis(document_malformed, first_seq=49590338271490256608559692538361571095921575989136591200), DOCUMENT_STREAM))

# ---------------------------------------------------------------- DynamoDB Streams
# Changes of the example OrdersTable (template.yaml), as Lambda delivers them from its stream
# (NEW_AND_OLD_IMAGES): replicated by ratchet-writer (RATCHET_CHANGES=replicate) and totalled
# per customer by counter-writer (COUNTER_CHANGE_GROUP_BY=PK ...).
ORDERS_STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/OrdersTable/stream/2026-11-22T00:00:00.000"


def typed(value):
    """Plain JSON -> DynamoDB attribute-value JSON (sets given as Python sets)."""
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float)):
        return {"N": str(value)}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, (set, frozenset)):
        return {"SS": sorted(value)}
    if isinstance(value, list):
        return {"L": [typed(v) for v in value]}
    if isinstance(value, dict):
        return {"M": {k: typed(v) for k, v in value.items()}}
    return {"NULL": True}


def change(i, name, pk, sk, new=None, old=None, first_seq=4421584500000000017450439000):
    keys = {"PK": pk, "SK": sk}
    record = {
        "ApproximateCreationDateTime": 1721770090.0,
        "Keys": {k: typed(v) for k, v in keys.items()},
        "SequenceNumber": str(first_seq + i),
        "SizeBytes": 120,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    if new is not None:
        record["NewImage"] = {k: typed(v) for k, v in dict(keys, **new).items()}
    if old is not None:
        record["OldImage"] = {k: typed(v) for k, v in dict(keys, **old).items()}
    return {
        "eventID": "c0ffee%04d" % i,
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": record,
        "eventSourceARN": ORDERS_STREAM,
    }


orders = [
    change(0, "INSERT", "alice", "o1", new={"Amount": 30, "Status": "new", "Tags": {"gift"}}),
    change(1, "INSERT", "alice", "o2", new={"Amount": 12, "Status": "new"}),
    change(2, "MODIFY", "alice", "o1", new={"Amount": 45, "Status": "paid", "Tags": {"gift", "rush"}},
           old={"Amount": 30, "Status": "new", "Tags": {"gift"}}),
    change(3, "INSERT", "bob", "o1", new={"Amount": 7, "Status": "new", "_txLock": "tx-9"}),
    change(4, "REMOVE", "alice", "o2", old={"Amount": 12, "Status": "new"}),
]
write("orders-dynamodb-stream.json", {"Records": orders})
# The same batch delivered again (Lambda retries a batch; shards are read in parallel).
write("orders-dynamodb-stream-redelivered.json", {"Records": [orders[2], orders[0], orders[4], orders[3], orders[1]]})
# ---------------------------------------------------------------- sources: KPL aggregates, SQS FIFO
KPL_MAGIC = bytes([0xF3, 0x89, 0x9A, 0xC2])


def kinesis_record(seq, partition_key, data, shard="shardId-000000000000", arn=STREAM):
    """One Kinesis record of a Lambda event; `data` is bytes."""
    return {
        "kinesis": {
            "kinesisSchemaVersion": "1.0",
            "partitionKey": partition_key,
            "sequenceNumber": str(seq),
            "data": base64.b64encode(data).decode(),
            "approximateArrivalTimestamp": 1721770090.123,
        },
        "eventSource": "aws:kinesis",
        "eventVersion": "1.0",
        "eventID": "%s:%s" % (shard, seq),
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
        "awsRegion": "us-east-1",
        "eventSourceARN": arn,
    }


def body_bytes(body):
    return (body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))).encode()


def aggregate(user_records):
    """One KPL aggregate (bytes) of (partition key, body[, explicit hash key]) user records,
    made by aws-kinesis-agg; the aggregate's partition key is its first user record's."""
    aggregator = RecordAggregator()
    for user in user_records:
        pk, body = user[0], user[1]
        ehk = user[2] if len(user) > 2 else None
        if aggregator.add_user_record(pk, body_bytes(body), ehk) is not None:
            raise SystemExit("make-events: an aggregate overflowed; keep the samples small")
    pk, _ehk, data = aggregator.clear_and_get().get_contents()
    return pk, data


def aggregated_event(parents, first_seq, arn=STREAM):
    """A Kinesis event of `parents`: each a list of user records (aggregated) or a single
    (partition key, body) tuple (a plain record)."""
    records = []
    for i, parent in enumerate(parents):
        if isinstance(parent, list):
            pk, data = aggregate(parent)
        else:
            pk, data = parent[0], body_bytes(parent[1])
        records.append(kinesis_record(first_seq + i, pk, data, arn=arn))
    return {"Records": records}


def raw_aggregate(message):
    """An aggregate framed by hand around a protobuf message (for malformed samples)."""
    data = message.SerializeToString()
    return KPL_MAGIC + data + hashlib.md5(data).digest()


# Ratchet records of two new users, with an out-of-order put, a duplicate and a delete; the
# aggregated event carries them in two aggregates and one plain record, the unaggregated one as
# plain records in the same order (tests: both give the same table).
agg_users = [
    ("User#7", put("User#7", "Movie#K", 1721770200000, Rating=2)),
    ("User#8", put("User#8", "Movie#L", 1721770200000, Rating=5)),
    ("User#7", put("User#7", "Movie#K", 1721770300000, Rating=4, Review="better on second viewing")),
    ("User#7", put("User#7", "Movie#K", 1721770250000, Rating=3)),
    ("User#8", put("User#8", "Movie#M", 1721770200000, Rating=1)),
    ("User#8", delete("User#8", "Movie#M", 1721770400000), "170141183460469231731687303715884105727"),
    ("User#8", put("User#8", "Movie#L", 1721770200000, Rating=5)),
    ("User#7", put("User#7", "Movie#N", 1721770200000, Rating=5)),
]
AGG_SEQ = 49590338271490256608559692538361571095921575989136592000
write("ratchet-kinesis-aggregated.json",
      aggregated_event([agg_users[0:4], agg_users[4], agg_users[5:8]], AGG_SEQ))
write("ratchet-kinesis-unaggregated.json",
      aggregated_event([u[:2] for u in agg_users], AGG_SEQ + 100))

# Malformed aggregates next to a valid one (whose third user record is not JSON: that one
# alone is dead-lettered): a flipped checksum byte, a truncated protobuf under a matching
# checksum, and a user record naming a partition key outside the table.
_, good = aggregate([("User#9", put("User#9", "Movie#P", 1721770200000, Rating=4)),
                     ("User#9", put("User#9", "Movie#Q", 1721770200000, Rating=3)),
                     ("User#9", "{not json")])
bad_md5 = good[:-1] + bytes([good[-1] ^ 0x01])
pb = good[len(KPL_MAGIC):-16]
truncated = KPL_MAGIC + pb[:-5] + hashlib.md5(pb[:-5]).digest()
out_of_table = messages_pb2.AggregatedRecord()
out_of_table.partition_key_table.append("User#9")
user = out_of_table.records.add()
user.partition_key_index = 3
user.data = body_bytes(put("User#9", "Movie#R", 1721770200000, Rating=1))
MALFORMED_SEQ = AGG_SEQ + 200
write("ratchet-kinesis-aggregated-malformed.json", {"Records": [
    kinesis_record(MALFORMED_SEQ + i, "User#9", data)
    for i, data in enumerate([good, bad_md5, truncated, raw_aggregate(out_of_table)])
]})

# The counter samples again, aggregated: one aggregate per batch (counts must not change).
write("counter-kinesis-aggregated.json", aggregated_event(
    [[(b["key"]["PK"], b) for b in counter_batch], [(b["key"]["PK"], b) for b in counter_more]],
    49590338271490256608559692538361571095921575989136592300, arn=COUNTER_STREAM))


def sqs_fifo(messages, prefix, queue):
    """An SQS FIFO event: `messages` are (message group, body) pairs."""
    event = with_arn(sqs([body for _, body in messages], prefix), queue)
    for i, (record, (group, _)) in enumerate(zip(event["Records"], messages)):
        record["attributes"].update({
            "MessageGroupId": group,
            "MessageDeduplicationId": "%s-%02d" % (prefix, i),
            "SequenceNumber": str(18849496460467696128 + i),
        })
    return event


# Two interleaved message groups (one per paying account). In order, each group's second
# transfer finds too little money and rolls back; the third of ann's group commits.
TX_FIFO_QUEUE = "arn:aws:sqs:us-east-1:123456789012:TxQueue.fifo"
write("tx-fifo.json", sqs_fifo([
    ("ann", tx_transfer("fifo-ann-1", "ann", "ben", 60)),
    ("dan", tx_transfer("fifo-dan-1", "dan", "eve", 20)),
    ("ann", tx_transfer("fifo-ann-2", "ann", "cat", 50)),
    ("dan", tx_transfer("fifo-dan-2", "dan", "eve", 40)),
    ("ann", tx_transfer("fifo-ann-3", "ann", "ben", 10)),
], "tx-fifo", TX_FIFO_QUEUE))


def kafka(partitions, source="aws:kafka", arn=None, servers="b-1.ratings.abc123.c2.kafka.us-east-1.amazonaws.com:9098"):
    """A Kafka event as Lambda delivers it (Amazon MSK, or `SelfManagedKafka`): `partitions`
    maps `(topic, partition)` to `(offset, timestamp ms, key, body)` records; values and keys
    base64, one `producer` header (its bytes as numbers), timestamps `LOG_APPEND_TIME`."""
    records = {}
    for (topic, partition), batch in partitions.items():
        records["%s-%d" % (topic, partition)] = [{
            "topic": topic, "partition": partition, "offset": offset, "timestamp": ts,
            "timestampType": "LOG_APPEND_TIME",
            "key": base64.b64encode(key.encode()).decode(),
            "value": base64.b64encode((body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))).encode()).decode(),
            "headers": [{"producer": list(b"ratings-api")}],
        } for offset, ts, key, body in batch]
    event = {"eventSource": source}
    if arn:
        event["eventSourceArn"] = arn
    event["bootstrapServers"] = servers
    event["records"] = records
    return event


# A batch over two partitions of `ratings` (keyed by user, so each user's ratings are in one
# partition, in offset order), and a self-managed cluster's batch with a poison value and an
# unknown op between two good records of one partition.
RATINGS_CLUSTER = "arn:aws:kafka:us-east-1:123456789012:cluster/ratings/6f0c0b7e-1111-2222-3333-444455556666-1"
write("ratchet-kafka-batch.json", kafka({
    ("ratings", 0): [
        (100, 1721770090000, "User#21", put("User#21", "Movie#A", 1721770090000, Rating=3)),
        (101, 1721770091000, "User#21", put("User#21", "Movie#A", 1721770091000, Rating=4)),
        (102, 1721770092000, "User#21", put("User#21", "Movie#A", 1721770092000, Rating=5, Review="great")),
    ],
    ("ratings", 1): [
        (57, 1721770090500, "User#22", put("User#22", "Movie#B", 1721770090500, Rating=2)),
        (58, 1721770093000, "User#22", put("User#22", "Movie#B", 1721770093000, Rating=1, Review="meh")),
    ],
}, arn=RATINGS_CLUSTER))
write("ratchet-kafka-malformed.json", kafka({
    ("ratings", 0): [
        (200, 1721770090000, "User#24", put("User#24", "Movie#D", 1721770090000, Rating=4)),
        (201, 1721770090100, "User#24", "{this is not json"),
        (202, 1721770090200, "User#24", {"op": "upsert", "key": {"PK": "User#24", "SK": "Movie#E"}, "ts": 1721770090000}),
        (203, 1721770090300, "User#24", put("User#24", "Movie#D", 1721770091000, Rating=5)),
    ],
}, source="SelfManagedKafka", servers="kafka-1.example.internal:9096,kafka-2.example.internal:9096"))


# Avro values of events/schemas/rating.avsc (the binary encoding, written out here: zig-zag
# varint longs, length-prefixed strings, map blocks), framed as Confluent's serializer (magic
# byte 0, 4-byte schema id) or AWS Glue's (version 3, compression 0 or 5 = zlib, 16-byte schema
# version UUID) frames them. A test decodes them with apache-avro (tests/kafka/values.rs).
def avro_long(n):
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def avro_string(text):
    data = text.encode()
    return avro_long(len(data)) + data


def avro_rating(op, pk, sk, ts, **item):
    body = avro_long(["put", "delete"].index(op)) + avro_string(pk) + avro_string(sk) + avro_long(ts)
    if item:
        body += avro_long(len(item))
        for name, value in item.items():
            body += avro_string(name)
            body += avro_long(0) + avro_long(value) if isinstance(value, int) else avro_long(1) + avro_string(value)
    return body + avro_long(0)


def confluent(body, schema_id=1):
    return b"\x00" + schema_id.to_bytes(4, "big") + body


def glue(body, zlib_compressed=False):
    import zlib
    version = bytes.fromhex("6f0c0b7e11112222333344445555aaaa")
    if zlib_compressed:
        return b"\x03\x05" + version + zlib.compress(body)
    return b"\x03\x00" + version + body


def kafka_bytes(partitions, arn):
    """`kafka` with raw byte values (base64 as they are)."""
    event = kafka({tp: [(o, ts, k, "") for o, ts, k, _ in batch] for tp, batch in partitions.items()}, arn=arn)
    for (topic, partition), batch in partitions.items():
        for record, (_, _, _, value) in zip(event["records"]["%s-%d" % (topic, partition)], batch):
            record["value"] = base64.b64encode(value).decode()
    return event


# Avro values (schema events/schemas/rating.avsc) over two partitions: Confluent framing in
# partition 0, AWS Glue framing (plain, then zlib) in partition 1, and a JSON value where Avro is
# expected (a producer without the serializer): an `undecodable_value` dead letter.
write("ratchet-kafka-avro.json", kafka_bytes({
    ("ratings-avro", 0): [
        (300, 1721770090000, "User#31", confluent(avro_rating("put", "User#31", "Movie#A", 1721770090000, Rating=3))),
        (301, 1721770091000, "User#31", json.dumps(put("User#31", "Movie#A", 1721770091000, Rating=1)).encode()),
        (302, 1721770092000, "User#31", confluent(avro_rating("put", "User#31", "Movie#A", 1721770092000, Rating=5, Review="great"))),
    ],
    ("ratings-avro", 1): [
        (40, 1721770090500, "User#32", glue(avro_rating("put", "User#32", "Movie#B", 1721770090500, Rating=2))),
        (41, 1721770093000, "User#32", glue(avro_rating("put", "User#32", "Movie#B", 1721770093000, Rating=4, Review="fine"), zlib_compressed=True)),
    ],
}, arn=RATINGS_CLUSTER))
