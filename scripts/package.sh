#!/usr/bin/env bash
# Build every Lambda function of the workspace for arm64 (Graviton, provided.al2023), as
# template.yaml deploys them, and print each artifact's size.
#
# Installs what a fresh clone lacks: the aarch64 Rust target (rustup) and cargo-lambda with
# zig (PyPI: `cargo-lambda` pulls `ziglang`, which cross-links against glibc 2.x).
# Artifacts: target/lambda/<function>/bootstrap. Extra arguments go to `cargo lambda build`.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# Size of the binary and of the deployment zip Lambda stores (deflate, as SAM and cargo lambda zip it).
printf '%-18s %14s %14s\n' function "bootstrap (B)" "zipped (B)"
for dir in functions/*/; do
  name=$(basename "$dir")
  binary=target/lambda/$name/bootstrap
  if [ ! -f "$binary" ]; then
    echo "package: $binary is missing" >&2
    exit 1
  fi
  if ! file "$binary" | grep -q 'ARM aarch64'; then
    echo "package: $binary is not an aarch64 binary: $(file -b "$binary")" >&2
    exit 1
  fi
  zipped=$(python3 -c 'import io, sys, zipfile
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    z.write(sys.argv[1], "bootstrap")
print(len(buf.getvalue()))' "$binary")
  printf '%-18s %14s %14s\n' "$name" "$(stat -c %s "$binary")" "$zipped"
done
