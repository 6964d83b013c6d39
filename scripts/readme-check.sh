#!/usr/bin/env bash
# The README's "Use the library" as a new user meets it: a new crate outside the workspace
# whose Cargo.toml is the README's `[dependencies]` block (the path pointed at this checkout)
# and whose src/main.rs is the README's Rust block. Its dependency lines must resolve offline
# against this checkout's Cargo.lock, with one HTTP/TLS stack (no hyper 0.14, no rustls 0.21,
# no h2 0.3); then
#
#   scripts/readme-check.sh --run      build the crate and run it (`make readme-check`)
#   scripts/readme-check.sh --example  run the workspace's example instead, the same code
#                                      (shared/dynamodb-exactly-once/examples/quickstart/, the
#                                      README's block character for character: check-docs.py;
#                                      `make test`, seconds)
#
# against AWS_ENDPOINT_URL_DYNAMODB, or a DynamoDB Local of its own when that is unset. The
# crate shares the workspace's target directory and dev profile, but builds the dependencies
# the workspace builds with more features again (about a minute: docs/development.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
crate=target/readme-crate
rm -rf "$crate/src" "$crate/Cargo.toml"
mkdir -p "$crate/src"

python3 - "$root" "$crate" <<'PY'
import re, sys
root, crate = sys.argv[1], sys.argv[2]
readme = open(f"{root}/README.md", encoding="utf-8").read()
blocks = re.findall(r"^```(\w*)[^\n]*\n(.*?)^```", readme, re.S | re.M)
tomls = [b for lang, b in blocks if lang == "toml" and "[dependencies]" in b]
rusts = [b for lang, b in blocks if lang == "rust"]
if not tomls or not rusts:
    sys.exit("readme-check: README.md needs a ```toml [dependencies] block and a ```rust block")
deps = tomls[0]
path = re.search(r'dynamodb-exactly-once = \{ path = "([^"]+)" \}', deps)
if not path:
    sys.exit("readme-check: the README's dependency line is not `dynamodb-exactly-once = { path = \"...\" }`")
deps = deps.replace(path.group(1), f"{root}/shared/dynamodb-exactly-once")
manifest = ('[package]\nname = "readme-crate"\nversion = "0.0.0"\nedition = "2021"\npublish = false\n\n'
            + deps + "\n[workspace]\n")
open(f"{crate}/Cargo.toml", "w", encoding="utf-8").write(manifest)
open(f"{crate}/src/main.rs", "w", encoding="utf-8").write(rusts[0])
# The table creation the block names (`mod tables;`), from the example beside it.
tables = open(f"{root}/shared/dynamodb-exactly-once/examples/quickstart/tables.rs", encoding="utf-8").read()
open(f"{crate}/src/tables.rs", "w", encoding="utf-8").write(tables)
PY

# The checkout's versions, as a user who copies the line today gets them (no index update).
cp Cargo.lock "$crate/Cargo.lock"
if ! tree=$(cargo tree --offline --quiet --manifest-path "$crate/Cargo.toml" -e normal --prefix none); then
  echo "readme-check: the README's dependencies need crates outside this checkout's Cargo.lock" \
    "(the SDK's default features, for one, bring a legacy HTTP/TLS stack)" >&2
  exit 1
fi
for legacy in "hyper v0.14" "rustls v0.21" "h2 v0.3"; do
  if grep -q "^$legacy" <<<"$tree"; then
    echo "readme-check: the README's dependencies bring $legacy (a second HTTP/TLS stack)" >&2
    exit 1
  fi
done
echo "readme-check: the README's dependencies resolve ($(sort -u <<<"$tree" | wc -l) crates, one HTTP/TLS stack)"

case "${1:-}" in
  --run)
    # The workspace's [profile.dev] sections, which a crate outside the workspace does not inherit.
    profile=(--config 'profile.dev.debug="line-tables-only"' --config 'profile.dev.package."*".debug=false')
    for package in $(sed -n 's/^\[profile\.dev\.package\.\([a-z0-9_-]*\)\]$/\1/p' Cargo.toml); do
      profile+=(--config "profile.dev.package.$package.opt-level=2")
    done
    start=$(date +%s)
    CARGO_TARGET_DIR="$root/target" cargo build --offline --quiet "${profile[@]}" \
      --manifest-path "$crate/Cargo.toml"
    echo "readme-check: the README's crate built in $(($(date +%s) - start)) s"
    program="$root/target/debug/readme-crate" ;;
  --example)
    cargo build --quiet --workspace --all-features --example quickstart
    program="$root/target/debug/examples/quickstart" ;;
  *) exit 0 ;;
esac

if [ -z "${AWS_ENDPOINT_URL_DYNAMODB:-}" ]; then
  . scripts/lib/dynamodb-local.sh
  start_dynamodb_local target/readme-crate/dynamodb-local.log
  trap 'kill "$DYNAMODB_LOCAL_PID" 2>/dev/null || true' EXIT
fi
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" \
  AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
out=$("$program")
echo "$out" | sed 's/^/  /'
# A second run finds the tables it wrote: its first writes are Duplicates too.
for line in "ratchet: Stale" "stored: Some(Rating { stars: 5 })" "counter: Duplicate"; do
  grep -qF "$line" <<<"$out" || { echo "readme-check: the README's program did not print '$line'" >&2; exit 1; }
done
