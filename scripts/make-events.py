#!/usr/bin/env python3
"""Regenerate the sample events in events/ (Kinesis data is base64, so they are generated)."""
import base64, json, os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "events")
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
