#!/usr/bin/env bash
# Build every Lambda function of the workspace for arm64 (Graviton, provided.al2023), as the
# templates deploy them, then package them for a deployment without a Rust toolchain
# (scripts/package_templates.py): target/package/<binary>.zip and the packaged writer stacks
# target/package/<stack>.yaml (code beside) and <stack>.s3.yaml (code in S3). docs/deploy.md.
#
# Installs what a fresh clone lacks: the aarch64 Rust target (rustup) and cargo-lambda with
# zig (PyPI: `cargo-lambda` pulls `ziglang`, which cross-links against glibc 2.x).
# Binaries: target/lambda/<function>/bootstrap. Extra arguments go to `cargo lambda build`.
# PACKAGE_ONLY=1: skip the build, package the binaries already in target/lambda.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${PACKAGE_ONLY:-}" = 1 ]; then
  exec python3 scripts/package_templates.py
fi

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
  echo "package: adding the Rust target aarch64-unknown-linux-gnu"
  rustup target add aarch64-unknown-linux-gnu
fi
if ! command -v cargo-lambda >/dev/null 2>&1; then
  echo "package: installing cargo-lambda (PyPI, with ziglang)"
  python3 -m pip install -q cargo-lambda
fi

# One cargo invocation for every binary under functions/ (they share one dependency build).
packages=()
count=0
for dir in functions/*/; do
  packages+=(-p "$(basename "$dir")")
  count=$((count + 1))
done
start=$(date +%s)
cargo lambda build --release --arm64 "${packages[@]}" "$@"
echo "package: built $count functions for arm64 in $(($(date +%s) - start)) s"

# (A missing binary: package_templates.py names it.)
for dir in functions/*/; do
  binary=target/lambda/$(basename "$dir")/bootstrap
  if [ -f "$binary" ] && ! file "$binary" | grep -q 'ARM aarch64'; then
    echo "package: $binary is not an aarch64 binary: $(file -b "$binary")" >&2
    exit 1
  fi
done
python3 scripts/package_templates.py
