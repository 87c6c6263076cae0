# Developer shortcuts; CI runs .ci/run, which does the same from a fresh clone. `make check`
# lints and type-checks exactly what CI does.
.PHONY: check lint typecheck test test-system ci

SYSTEM_DSN ?= postgresql://postgres@127.0.0.1:5432/test

check: lint typecheck

lint:
	ruff check pgqueue cli migrations tests benchmarks

# pgqueue, cli and tests, strict: the list is [tool.mypy] in pyproject.toml.
typecheck:
	mypy

# The whole suite: on PGQUEUE_TEST_DSN if set, else on a temporary embedded PostgreSQL.
test:
	pytest

# The whole suite on an existing server (the machine's PostgreSQL by default).
test-system:
	PGQUEUE_TEST_DSN=$(SYSTEM_DSN) pytest

ci:
	bash .ci/run
