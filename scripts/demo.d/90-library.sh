# Sourced by scripts/demo.sh: the library from a plain binary (no Lambda).
say "the library from a plain binary: shared/dynamodb-exactly-once/examples/plain.rs"
echo "Expect: newer Applied, older Stale, newer again Duplicate; the counter's redelivered e1 is a"
echo "Duplicate, logins = 3, one write request for the three records."
"$TARGET/debug/examples/plain"
