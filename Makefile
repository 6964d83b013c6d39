# The two commands of the README: `make demo` and `make test`.
.PHONY: demo test tools lint bench template-check

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

tools:
	bash scripts/tools.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

template-check:
	bash scripts/check-template.sh

bench:
	bash scripts/bench.sh
