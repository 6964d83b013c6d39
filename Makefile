# The two commands of the README: `make demo` and `make test`.
.PHONY: demo test tools lint bench template-check tx-check package

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

tools:
	bash scripts/tools.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets --all-features -- -D warnings

template-check:
	bash scripts/check-template.sh

bench:
	bash scripts/bench.sh

# The randomized transaction checker at length (10,000 schedules; `make test` runs 300).
# TX_CHECK_SEED=<seed> TX_CHECK_SCHEDULES=1 make tx-check replays one schedule.
TX_CHECK_SCHEDULES ?= 10000
tx-check:
	TX_CHECK_SCHEDULES=$(TX_CHECK_SCHEDULES) TX_CHECK_PARALLEL=$${TX_CHECK_PARALLEL:-8} \
		cargo test -p integration-tests --test integration txn_check:: -- --nocapture

# arm64 artifacts of every function (cargo lambda + zig), with their sizes.
package:
	bash scripts/package.sh
