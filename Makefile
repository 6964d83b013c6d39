# The two commands of the README: `make demo` and `make test`.
.PHONY: demo test tools lint bench template-check stacks tx-check counter-check checks package readme-check features book deny ci-extra events

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

# Each optional feature of the library crates compiled on its own and with none (cargo-hack,
# installed from crates.io when missing; each is a build of its own dependency graph: about
# 2 min each on 2 cores, so not in `make test`, which builds everything with --all-features).
features:
	command -v cargo-hack >/dev/null 2>&1 || cargo install --locked cargo-hack --version 0.6.46
	cargo hack clippy --each-feature --lib -p dynamodb-exactly-once -p dynamodb-exactly-once-lambda -- -D warnings

# The docs book as a website in target/book/html (mdBook 0.5.4, installed from crates.io when
# missing; book.toml), every link and anchor of the site checked (lychee, lychee.toml).
book:
	command -v mdbook >/dev/null 2>&1 || cargo install --locked mdbook --version 0.5.4 --no-default-features --features search
	bash scripts/tools.sh
	mdbook build
	lychee target/book/html

# What events/ derives from its other samples: the Kinesis twins of the SQS samples
# (shared/dev-testing/src/sample_events.rs, BLESS_EVENTS=1), then the KPL aggregates, made by AWS's
# aggregator from PyPI (scripts/kpl-events.py; the counter's from its Kinesis samples).
events:
	BLESS_EVENTS=1 cargo test -p dev-testing --lib -- sample_events::tests::kinesis_samples_carry_their_sqs_twins_bodies
	python3 scripts/kpl-events.py

# Licences, banned crates (a second HTTP/TLS stack) and sources of the dependency graph
# (deny.toml); advisories too where the RustSec database can be fetched (GitHub).
deny:
	command -v cargo-deny >/dev/null 2>&1 || cargo install --locked cargo-deny --version 0.20.2
	cargo deny check licenses bans sources

# What `make test` leaves out (deny, the book, readme-check, features, the MSRV): CI's second
# script, installing the tools it needs.
ci-extra:
	bash .ci/extra

# The README's dependencies and quickstart in a new crate outside the workspace, built and run
# against AWS_ENDPOINT_URL_DYNAMODB (`make test` checks the crate and runs the same code as the
# workspace's example).
readme-check:
	bash scripts/tools.sh
	bash scripts/readme-check.sh --run

# docs/deploy.md's parameter tables from the templates' Parameters (after editing a stack).
stacks:
	python3 scripts/param-tables.py

bench:
	bash scripts/bench.sh

# The randomized transaction checker at length (10,000 schedules; `make test` runs 100).
# TX_CHECK_SEED=<seed> TX_CHECK_SCHEDULES=1 make tx-check replays one schedule.
TX_CHECK_SCHEDULES ?= 10000
tx-check:
	TX_CHECK_SCHEDULES=$(TX_CHECK_SCHEDULES) TX_CHECK_PARALLEL=$${TX_CHECK_PARALLEL:-8} \
		cargo test -p integration-tests --test integration txn::check:: -- --nocapture

# The counter journal's randomized checker at length (100 schedules; `make test` runs 1), through
# the event source mapping emulator over the Streams double at random stream shapes.
# COUNTER_MAPPING_CHECK_SEED=<seed> COUNTER_CHECK_SCHEDULES=1 make counter-check replays one schedule.
COUNTER_CHECK_SCHEDULES ?= 100
counter-check:
	COUNTER_MAPPING_CHECK_SCHEDULES=$(COUNTER_CHECK_SCHEDULES) \
		cargo test -p integration-tests --test integration counter::journal::mapping_check:: -- --nocapture

# arm64 artifacts of every function (cargo lambda + zig), with their sizes.
# arm64 release build (~10 min cold), then target/package: zips and packaged templates
# (docs/deploy.md). PACKAGE_ONLY=1: package the binaries already built.
package:
	PACKAGE_ONLY=$(PACKAGE_ONLY) bash scripts/package.sh

# The other protocols' randomized checkers at length (`make test` runs 15 to 200 schedules of
# each); each prints its first seed, and a failure the variables that replay its schedule.
checks:
	RATCHET_CHECK_SCHEDULES=$${RATCHET_CHECK_SCHEDULES:-1000} \
	COUNTER_INLINE_CHECK_SCHEDULES=$${COUNTER_INLINE_CHECK_SCHEDULES:-1000} \
	VERSIONING_CHECK_SCHEDULES=$${VERSIONING_CHECK_SCHEDULES:-1000} \
	IDEMPOTENCY_CHECK_SCHEDULES=$${IDEMPOTENCY_CHECK_SCHEDULES:-300} \
	PROCESSOR_CHECK_SCHEDULES=$${PROCESSOR_CHECK_SCHEDULES:-5000} \
		cargo nextest run -p integration-tests --test integration --no-fail-fast \
		--success-output final -E 'test(/^(ratchet|counter|versioning|idempotency|processor)::check::/)'
