"""A Python function on aws-lambda-powertools' idempotency utility, driven line by line by
tests/idempotency/powertools.rs so that Python and Rust share one DynamoDB table.

Reads one JSON command per line on stdin: {"order": {...}} runs `charge(order=...)` under
`@idempotent_function`; an order with "hold": true claims the key, prints {"holding": true}
and waits for one more line before it returns. Answers one JSON line per command:
{"ran": bool, "result": ..., "error": <exception class name or null>}.

Environment: TABLE, SORT_KEY_ATTR (optional: Powertools' sort-key mode, the partition key
`id` then holds "idempotency#<function>"), AWS_ENDPOINT_URL_DYNAMODB (boto3 honours it), AWS_LAMBDA_FUNCTION_NAME
(the key's prefix: "<function>.__main__.charge#<md5>"), KEY_PREFIX (optional: the decorator's
`key_prefix`, the key then "<KEY_PREFIX>#<md5>"), dummy credentials.
"""

import json
import os
import sys

from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

persistence = DynamoDBPersistenceLayer(
    table_name=os.environ["TABLE"],
    sort_key_attr=os.environ.get("SORT_KEY_ATTR") or None,
)
config = IdempotencyConfig(
    event_key_jmespath="orderId",
    payload_validation_jmespath="amount",
    expires_after_seconds=3600,
)
ran = False


@idempotent_function(
    data_keyword_argument="order",
    persistence_store=persistence,
    config=config,
    key_prefix=os.environ.get("KEY_PREFIX") or None,
)
def charge(order):
    global ran
    ran = True
    if order.get("hold"):
        print(json.dumps({"holding": True}), flush=True)
        sys.stdin.readline()
    return {"chargeId": f"py-{order['orderId']}", "amount": order["amount"]}


for line in sys.stdin:
    if not line.strip():
        continue
    command = json.loads(line)
    ran = False
    try:
        result = charge(order=command["order"])
        answer = {"ran": ran, "result": result, "error": None}
    except Exception as exc:  # the test asserts on the class name
        answer = {"ran": ran, "result": None, "error": type(exc).__name__}
    print(json.dumps(answer), flush=True)
