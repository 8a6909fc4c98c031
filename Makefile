# Two commands on a fresh machine (Python 3.11, pip, root): `make serve`, `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test test-fast lint train bench bench-quick kserve-venv chaos learning-curve collect train-xla-cpu xla-tuning monitoring-plot redis-server postgresql prometheus clean

# The service needs no torch: `make serve` installs the runtime dependencies only.
$(VENV)/.serve-deps: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[service]'
	touch $@

# Tests, training and benchmarks: everything, torch (CPU) included.
$(VENV)/.all-deps: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[service,train,test,bench,dev,xla]'
	touch $@ $(VENV)/.serve-deps

serve: $(VENV)/.serve-deps
	$(BIN)/costmodel serve --host $(HOST) --port $(PORT)

# Tests talk to a real redis-server started on a free port; install the binary if missing.
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || { echo "redis-server missing"; exit 1; }

# Tests start their own PostgreSQL cluster (initdb + postgres on a free port); Debian
# keeps the server binaries in /usr/lib/postgresql/<major>/bin, off PATH.
PG_INITDB = command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1
postgresql:
	@$(PG_INITDB) || { \
	  echo "installing postgresql"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq postgresql >/dev/null; }
	@$(PG_INITDB) || { echo "postgresql (initdb) missing"; exit 1; }

# Tests run `promtool check/test rules` and a real Prometheus scraping a real service.
prometheus:
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  echo "installing prometheus"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }
	@command -v promtool >/dev/null 2>&1 || { echo "prometheus (promtool) missing"; exit 1; }

test: $(VENV)/.all-deps redis-server postgresql prometheus kserve-venv
	$(BIN)/pytest

# What CI runs before the tests: lint, the formatter's check and mypy --strict over
# every package of xla_costmodel (pyproject.toml [tool.mypy]).
lint: $(VENV)/.all-deps
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# Rebuilds the shipped models from the labelled real files in datasets/tpugraphs.
train: $(VENV)/.all-deps
	$(BIN)/python -m xla_costmodel.models.shipped

# The bench's peer, KServe 0.21, in a virtualenv of its own: it pins protobuf < 7.
KSERVE_VENV := .venv-kserve
$(KSERVE_VENV)/.deps:
	test -x $(KSERVE_VENV)/bin/python || $(PYTHON) -m venv $(KSERVE_VENV)
	$(KSERVE_VENV)/bin/python -m pip install -q kserve==0.21.0 onnxruntime numpy
	touch $@

kserve-venv: $(KSERVE_VENV)/.deps

bench: $(VENV)/.all-deps redis-server postgresql kserve-venv
	$(BIN)/costmodel bench

bench-quick: $(VENV)/.all-deps redis-server postgresql kserve-venv
	$(BIN)/costmodel bench --quick

# Faults under load (Redis paused and killed, PostgreSQL restarted, model reloads good
# and corrupt, overload), then a 10-minute soak: docs/chaos.md. Exits 1 if acknowledged
# feedback is missing from the database. `make chaos CHAOS_FLAGS=--quick`: ~3 minutes.
chaos: $(VENV)/.all-deps redis-server postgresql
	$(BIN)/costmodel chaos $(CHAOS_FLAGS)

# Per-graph adaptation measured end to end (trains leave-one-kernel-out tile models,
# starts redis-server, PostgreSQL and services): studies/results/learning_curve.*
learning-curve: $(VENV)/.all-deps redis-server postgresql
	$(BIN)/python -m xla_costmodel.studies.learning

# The xla_cpu dataset: one folder per target (CPU). Zoo programs x 60 sampled XLA:CPU
# option sets (row 0 the default), measured on this machine into its target's folder
# (resumable; progress in datasets/xla_cpu/<target>/progress.log), then its datasheet.
XLA_TARGET = $(shell $(BIN)/python -c "from xla_costmodel.tpugraphs import machine; print(machine.target())" 2>/dev/null)
collect: $(VENV)/.all-deps
	$(BIN)/costmodel collect --configs 60 --time-budget 4500 --noise-threshold 0.10 --runs 2 --max-rounds 9 --out datasets/xla_cpu/$(XLA_TARGET)
	$(BIN)/python -m xla_costmodel.collection.datasheet datasets/xla_cpu/$(XLA_TARGET)

# The xla_cpu model from every target of datasets/xla_cpu: cross-validation leaving
# families and targets out, then trained on every program: models/artifacts/xla_cpu/1
# (CV metrics in its manifest, per-target knowledge seeds in knowledge.npz).
train-xla-cpu: $(VENV)/.all-deps
	$(BIN)/python -m xla_costmodel.models.xla_cpu_recipe

# The fleet simulation (costmodel simulate): per target, programs tuned at K = 1..16
# after h = 0, 5, 10, 20 others, by the real policy vs random, the best fixed set and
# the oracle, and a second fleet reusing the first's decisions (docs/tuning-budgets.md):
# studies/results/budgets.json (committed) and budgets.png
xla-tuning: $(VENV)/.all-deps
	$(BIN)/costmodel simulate --budgets 1,2,4,8,16 --out studies/results/budgets.json \
		--plot studies/results/budgets.png

# The README's monitoring figure: a real service and Prometheus, a fleet of tuners
# replaying datasets/xla_cpu; the recorded series plotted (studies/results/monitoring.*).
monitoring-plot: $(VENV)/.all-deps prometheus
	$(BIN)/python -m xla_costmodel.studies.monitoring

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
