#!/usr/bin/env python3
"""Regenerate the KPL-aggregated sample events of events/ (`make events` runs it).

They are test vectors from an independent implementation: the aggregates are made by
`aws-kinesis-agg`, the aggregation format's own Python package (PyPI). When it is not importable,
this creates a virtual environment under .tools/py-events, installs the pinned versions there
and runs itself again inside it. The files are committed: tests never need PyPI. The other
sample events are data, edited as such (docs/development.md, "Sample events").
"""
import base64, hashlib, json, os, subprocess, sys

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
EVENTS = os.path.join(REPO, "events")
AGG_PACKAGES = ["aws-kinesis-agg==1.2.3", "six==1.17.0", "protobuf==7.36.2"]

try:
    from aws_kinesis_agg.aggregator import RecordAggregator
    from aws_kinesis_agg import messages_pb2
except ImportError:
    venv = os.path.abspath(os.path.join(REPO, ".tools", "py-events"))
    python = os.path.join(venv, "bin", "python")
    if os.path.abspath(sys.prefix) == venv:
        raise
    if not os.path.exists(python):
        print("kpl-events: installing %s into %s" % (" ".join(AGG_PACKAGES), venv), file=sys.stderr)
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([python, "-m", "pip", "install", "-q", *AGG_PACKAGES])
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])

STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/RatchetStream"
COUNTER_STREAM = "arn:aws:kinesis:us-east-1:123456789012:stream/CounterStream"
KPL_MAGIC = bytes([0xF3, 0x89, 0x9A, 0xC2])


def body(value):
    return (value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))).encode()


def put(pk, sk, ts, **item):
    return {"op": "put", "key": {"PK": pk, "SK": sk}, "ts": ts, "item": item}


def kinesis_record(seq, partition_key, data, arn=STREAM):
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
        "eventID": "shardId-000000000000:%s" % seq,
        "eventName": "aws:kinesis:record",
        "invokeIdentityArn": "arn:aws:iam::123456789012:role/lambda-role",
        "awsRegion": "us-east-1",
        "eventSourceARN": arn,
    }


def aggregate(user_records):
    """One aggregate (partition key, bytes) of (partition key, body[, explicit hash key]) user
    records, made by aws-kinesis-agg; its partition key is its first user record's."""
    aggregator = RecordAggregator()
    for user in user_records:
        ehk = user[2] if len(user) > 2 else None
        if aggregator.add_user_record(user[0], body(user[1]), ehk) is not None:
            raise SystemExit("kpl-events: an aggregate overflowed; keep the samples small")
    pk, _ehk, data = aggregator.clear_and_get().get_contents()
    return pk, data


def event(parents, first_seq, arn=STREAM):
    """A Kinesis event of `parents`: each a list of user records (one aggregate) or one
    (partition key, body) pair (a plain record)."""
    records = []
    for i, parent in enumerate(parents):
        pk, data = aggregate(parent) if isinstance(parent, list) else (parent[0], body(parent[1]))
        records.append(kinesis_record(first_seq + i, pk, data, arn))
    return {"Records": records}


def write(name, value):
    with open(os.path.join(EVENTS, name), "w") as f:
        json.dump(value, f, indent=2)
        f.write("\n")


# Ratchet records of two new users, with an out-of-order put, a duplicate and a delete; the
# aggregated event carries them in two aggregates and one plain record, the unaggregated one as
# plain records in the same order (tests: both give the same table).
users = [
    ("User#7", put("User#7", "Movie#K", 1721770200000, Rating=2)),
    ("User#8", put("User#8", "Movie#L", 1721770200000, Rating=5)),
    ("User#7", put("User#7", "Movie#K", 1721770300000, Rating=4, Review="better on second viewing")),
    ("User#7", put("User#7", "Movie#K", 1721770250000, Rating=3)),
    ("User#8", put("User#8", "Movie#M", 1721770200000, Rating=1)),
    ("User#8", {"op": "delete", "key": {"PK": "User#8", "SK": "Movie#M"}, "ts": 1721770400000},
     "170141183460469231731687303715884105727"),
    ("User#8", put("User#8", "Movie#L", 1721770200000, Rating=5)),
    ("User#7", put("User#7", "Movie#N", 1721770200000, Rating=5)),
]
SEQ = 49590338271490256608559692538361571095921575989136592000
write("ratchet-kinesis-aggregated.json", event([users[0:4], users[4], users[5:8]], SEQ))
write("ratchet-kinesis-unaggregated.json", event([u[:2] for u in users], SEQ + 100))

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
user.data = body(put("User#9", "Movie#R", 1721770200000, Rating=1))
raw = out_of_table.SerializeToString()
write("ratchet-kinesis-aggregated-malformed.json", {"Records": [
    kinesis_record(SEQ + 200 + i, "User#9", data) for i, data in
    enumerate([good, bad_md5, truncated, KPL_MAGIC + raw + hashlib.md5(raw).digest()])]})


# The counter samples again, aggregated: one aggregate per batch (counts must not change).
def user_records(name):
    with open(os.path.join(EVENTS, name)) as f:
        bodies = [json.loads(base64.b64decode(r["kinesis"]["data"])) for r in json.load(f)["Records"]]
    return [(b["key"]["PK"], b) for b in bodies]


write("counter-kinesis-aggregated.json", event(
    [user_records("counter-kinesis-batch.json"), user_records("counter-kinesis-more.json")],
    49590338271490256608559692538361571095921575989136592300, arn=COUNTER_STREAM))
