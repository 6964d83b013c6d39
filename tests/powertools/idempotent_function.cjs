// A Node function on @aws-lambda-powertools/idempotency (TypeScript Powertools, 2.35.0),
// driven line by line by tests/idempotency_powertools_ts.rs so that Node and Rust share one
// DynamoDB table.
//
// Reads one JSON command per line on stdin: {"order": {...}} runs `charge(order)` made
// idempotent by `makeIdempotent`; an order with "hold": true claims the key, prints
// {"holding": true} and waits for one more line before it returns. {"hash": value} answers
// {"key": ..., "validation": ...}: the key and validation hash Powertools computes for the
// value (as an order's `orderId` and `amount`), without a table. Answers one JSON line per
// command: {"ran": bool, "result": ..., "error": <error class name or null>}.
//
// Environment: TABLE, SORT_KEY_ATTR (optional: sort-key mode, the partition key `id` then
// holding "idempotency#<function>"), KEY_PREFIX (optional: `keyPrefix`),
// AWS_ENDPOINT_URL_DYNAMODB, AWS_LAMBDA_FUNCTION_NAME (the key's prefix:
// "<function>#<base64 md5>"), dummy credentials. NODE_PATH finds the packages
// (scripts/tools.sh installs them under .tools/powertools-ts).

const readline = require('node:readline');
const {
  IdempotencyConfig,
  makeIdempotent,
} = require('@aws-lambda-powertools/idempotency');
const {
  DynamoDBPersistenceLayer,
} = require('@aws-lambda-powertools/idempotency/dynamodb');

const persistenceStore = new DynamoDBPersistenceLayer({
  tableName: process.env.TABLE || 'unused',
  sortKeyAttr: process.env.SORT_KEY_ATTR || undefined,
  clientConfig: { endpoint: process.env.AWS_ENDPOINT_URL_DYNAMODB, region: 'us-east-1' },
});
const config = new IdempotencyConfig({
  eventKeyJmesPath: 'orderId',
  payloadValidationJmesPath: 'amount',
  expiresAfterSeconds: 3600,
});
// A Lambda context: in-progress records then carry `in_progress_expiration` (30 s ahead).
config.registerLambdaContext({ getRemainingTimeInMillis: () => 30000 });

const lines = readline.createInterface({ input: process.stdin });
const next = lines[Symbol.asyncIterator]();
let ran = false;

const charge = makeIdempotent(
  async (order) => {
    ran = true;
    if (order.hold) {
      process.stdout.write(`${JSON.stringify({ holding: true })}\n`);
      await next.next();
    }
    return { chargeId: `ts-${order.orderId}`, amount: order.amount };
  },
  { persistenceStore, config, keyPrefix: process.env.KEY_PREFIX || undefined }
);

async function main() {
  for (;;) {
    const { value: line, done } = await next.next();
    if (done) return;
    if (!line.trim()) continue;
    const command = JSON.parse(line);
    let answer;
    if ('hash' in command) {
      persistenceStore.configure({ config, keyPrefix: process.env.KEY_PREFIX || undefined });
      const data = { orderId: command.hash, amount: command.hash };
      answer = {
        key: persistenceStore.getHashedIdempotencyKey(data),
        validation: persistenceStore.getHashedPayload(data),
      };
    } else {
      ran = false;
      try {
        const result = await charge(command.order);
        answer = { ran, result: result === undefined ? null : result, error: null };
      } catch (error) {
        answer = { ran, result: null, error: error.constructor.name };
      }
    }
    process.stdout.write(`${JSON.stringify(answer)}\n`);
  }
}

main();
