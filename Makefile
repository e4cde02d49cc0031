# The two commands of README.md: `make up` runs the product, `make test` runs every test
# (ruff, the import layers, the documentation site, then pytest).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: up test install lint

# The page's development sign-in (docs/employee-page.md): everyone who opens
# http://127.0.0.1:8000/ on this machine is DEV_USER with DEV_GROUPS.
DEV_USER ?= 開発ユーザー
DEV_GROUPS ?= all-employees

# The Dagster UI's port and the query service's (the page's). Not PORT: make takes variables
# from the environment, where PORT is often set for something else.
DAGSTER_PORT ?= 3000
SERVICE_PORT ?= 8000

# Ctrl-C, SIGTERM or SIGHUP, to make alone or to its whole process group, stops everything.
# `exec`: kb up, not /bin/sh, is make's child, so it gets the SIGTERM make passes on (dash
# would not pass it on, and kb up would outlive make). --stop-with-parent: make passes on no
# SIGINT or SIGHUP sent to it alone but waits for kb up, which notices make starting to end.
up: install
	exec $(VENV)/bin/kb up --stop-with-parent --dev-user "$(DEV_USER)" --groups "$(DEV_GROUPS)" \
		--dagster-port $(DAGSTER_PORT) --port $(SERVICE_PORT)

# pytest: two workers, each with its own embedded PostgreSQL; a module's tests stay on one
# worker, so a module's fixtures (an indexed installation, a running service) are built once.
test: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mkdocs build --strict --quiet --site-dir $(VENV)/site
	$(VENV)/bin/pytest -q -n 2 --dist loadscope

install: $(STAMP)

# Reinstall only when the declared dependencies change, so a second `make` starts at once.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test,docs]'
	touch $(STAMP)
