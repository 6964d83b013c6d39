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
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q "$@"
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

# DynamoDB Local and TypeScript Powertools (npm, scripts/tools/package.json) into .tools/.
if ! cmp -s scripts/tools/package.json .tools/package.json || ! npm ls --prefix .tools >/dev/null 2>&1; then
  echo "tools: installing scripts/tools/package.json into .tools/ (npm)"
  mkdir -p .tools
  cp scripts/tools/package.json .tools/package.json
  if ! log=$(npm install --prefix .tools --no-audit --no-fund --loglevel=error 2>&1); then
    echo "$log" >&2
    echo "tools: npm could not install scripts/tools/package.json into .tools/ (above)" >&2
    exit 1
  fi
fi

# The Python tools, pinned (scripts/tools/requirements.txt).
if ! python3 - scripts/tools/requirements.txt <<'PY'; then
import sys
from importlib.metadata import PackageNotFoundError, version
for line in open(sys.argv[1]):
    if line.strip() and not line.startswith("#"):
        name, pinned = line.strip().split("==")
        try:
            if version(name) != pinned:
                sys.exit(1)
        except PackageNotFoundError:
            sys.exit(1)
PY
  echo "tools: installing scripts/tools/requirements.txt (PyPI)"
  pip_install -r scripts/tools/requirements.txt
fi
