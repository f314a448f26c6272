# Set-up and checks. Every target that needs the environment creates it first; re-running is
# quick (stamps) and harmless (nothing is removed or re-downloaded when it is already there).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Debian packages the tests need (Fedora/RHEL equivalents are in README.md).
DEB_PACKAGES := dbus-daemon libdbus-1-dev libgirepository1.0-dev libcairo2-dev pkg-config \
                gir1.2-glib-2.0 rpm systemd python3-dev gcc
BENCH_DEB_PACKAGES := nginx-light cloud-init

.PHONY: all demo test lint compat unit rpm bench sysdeps clean help

all: test

help:
	@echo "make demo   - local node-config-server on loopback and first boots into scratch roots"
	@echo "make test   - lint, Python 3.9 check, the whole test suite (RPM build and unit checks included)"
	@echo "make rpm    - build the RPMs into build/rpm"
	@echo "make bench  - run every benchmark under benchmarks/ and print the table"

# Installs only what is missing; needs root (as on CI) and apt-get. Elsewhere it says what to install.
sysdeps:
	@missing=""; for p in $(DEB_PACKAGES) $(EXTRA_DEB); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	  else \
	    echo "missing system packages:$$missing (see README.md, 'Development set-up')"; \
	  fi; \
	fi

$(STAMP): pyproject.toml | sysdeps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,server]'
	@touch $(STAMP)

venv: sysdeps $(STAMP)

lint: venv
	$(VENV)/bin/ruff check agent tests benchmarks examples

compat: venv
	$(VENV)/bin/vermin -q --no-tips --violations --eval-annotations -t=3.9- agent

unit: venv
	$(VENV)/bin/pytest -q -p no:cacheprovider

test: lint compat unit

demo: venv
	$(PY) examples/demo.py

rpm: venv
	bash packaging/build-rpm.sh build/rpm

bench: venv
	@$(MAKE) --no-print-directory sysdeps EXTRA_DEB="$(BENCH_DEB_PACKAGES)"
	$(PY) benchmarks/run.py

clean:
	rm -rf build dist *.egg-info .pytest_cache
