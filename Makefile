# Set-up and checks. Every target that needs the environment creates it first; re-running is
# quick (stamps) and harmless (nothing is removed or re-downloaded when it is already there).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# The VM test (tests/vm, `make vm-test`): QEMU (TCG), debootstrap for the guest, debugfs/mkfs.ext4.
# Installing qemu-system-x86 upgrades some of the host's systemd packages on Debian 12.
# Defined before DEB_PACKAGES: `:=` expands what it names at once (an empty list, before).
VM_DEB_PACKAGES := qemu-system-x86 debootstrap e2fsprogs iproute2
# Debian packages the tests need (Fedora/RHEL equivalents are in docs/install.md).
DEB_PACKAGES := dbus-daemon libdbus-1-dev libgirepository1.0-dev libcairo2-dev pkg-config \
                gir1.2-glib-2.0 rpm systemd python3-dev gcc man-db $(VM_DEB_PACKAGES)
BENCH_DEB_PACKAGES := nginx-light cloud-init etcd-server haproxy wrk

.PHONY: all demo kube-demo kube-demo-stop test lint compat unit vm-boot vm-boot-part suite suites-part py39 venv39 rpm bench sysdeps clean help vm-test kube-bin prepare vm-base image image-base

all: test

help:
	@echo "make demo   - local node-config-server on loopback and first boots into scratch roots"
	@echo "make kube-demo - the same on a local Kubernetes control plane (make kube-bin), serve --backend"
	@echo "              kubernetes; runs until Ctrl-C or make kube-demo-stop"
	@echo "make test   - lint, Python 3.9 check, the whole test suite (RPM build, unit checks and the VM boot included),"
	@echo "              then the whole suite again on CPython 3.9 with RHEL 9's library versions (make py39)"
	@echo "make rpm    - build the RPMs into build/rpm, and the RHEL 9 ones into build/rpm-el9"
	@echo "make image  - node-config-server's container image, from Debian's archive (no registry), as a"
	@echo "              docker-archive: build/node-config-server-image.tar (podman load, ctr images import)"
	@echo "make vm-test - only the VM test: boot a Debian guest under QEMU against a real node-config-server"
	@echo "make kube-bin - build (once, cached) or find kube-apiserver, kube-controller-manager, kube-scheduler"
	@echo "              and kubelet 1.20.2 (and pause) for the tests' Kubernetes control plane and the VM guest;"
	@echo "              prints their directory as the last line"
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
	    echo "missing system packages:$$missing (see docs/install.md, 'With pip')"; \
	  fi; \
	fi

$(STAMP): pyproject.toml | sysdeps
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,server]'
	@touch $(STAMP)

venv: sysdeps $(STAMP)

# ruff, and the layout's import rules (import-linter; contracts in pyproject.toml, explained in
# docs/architecture.md). --no-cache: nothing is written into the checkout.
lint: venv
	$(VENV)/bin/ruff check agent tests benchmarks examples tools
	$(VENV)/bin/lint-imports --no-cache

compat: venv
	$(VENV)/bin/vermin -q --no-tips --violations --eval-annotations -t=3.9- agent

# NODE_AGENT_VM_TEST=1: the VM test (tests/vm) runs too; a bare pytest skips it.
# NODE_AGENT_NO_SKIP=1: a test that would skip (a missing tool, file or venv) fails instead
# (tests/conftest.py); a bare pytest may still skip, and says why.
# venv39 first: the RHEL 9 RPM tests run the agent on CPython 3.9 from .venv39.
# The VM boot (vm-boot: one vCPU under TCG; its waits are bounded per phase) runs beside the two
# suites (test, below). Both suites run in TEST_JOBS pytest-xdist workers: most tests
# wait on processes (servers, etcd, the control plane), not on the CPU. --dist loadgroup keeps the
# tests that use one session cluster (etcd_cluster, kube_cluster) on one worker
# (tests/conftest.py), so one etcd and one control plane serve them; a module with a cluster of
# its own goes to any worker.
# The tests that use a module-scoped fixture go to one worker with their module's others, so the
# fixture (a server, a walk, a cluster) is made once, not once per worker that got one of them.
TEST_JOBS ?= 3
XDIST = -n $(TEST_JOBS) --dist loadgroup --durations=30
# Python keeps its bytecode (__pycache__/, git-ignored) while the tests run, whatever the
# environment says: with PYTHONDONTWRITEBYTECODE=1 (set on the CI machine) every server, every
# node-agent run and each pytest worker compiled the project's modules from source again, and
# pytest rewrote every test module's assertions again (docs/development.md, "Where a suite's CPU goes").
vm-boot suite py39: export PYTHONDONTWRITEBYTECODE :=
vm-boot: venv kube-bin vm-base
	NODE_AGENT_VM_TEST=1 NODE_AGENT_NO_SKIP=1 $(VENV)/bin/pytest -q -p no:cacheprovider -m vm tests/vm

suite: venv venv39 kube-bin
	NODE_AGENT_NO_SKIP=1 $(VENV)/bin/pytest -q -p no:cacheprovider -m "not vm" $(XDIST)

unit: vm-boot suite

# On a fresh machine the slow set-up steps overlap: the Kubernetes build (CPU), the VM guest's
# Debian base (mostly download and unpack) and the two venvs (pip). -O keeps each one's log whole.
prepare: sysdeps
	@$(MAKE) --no-print-directory -j4 -O venv venv39 kube-bin vm-base image-base

# Each phase's time is printed at the end (and at a failure): tools/phase.sh, build/test-phases.txt.
# The VM scenario (one vCPU under TCG: a core, busy all along) runs beside the two suites, one
# after the other. The guest's QEMU runs ahead of them (tests/vm/guest.py, GUEST_NICE): it keeps
# its core as when it ran alone, and the suites take the other one and what the guest leaves.
# Every test waits for the state it asserts, whatever the load (issue 54; docs/development.md,
# "Development set-up"). -O keeps each one's output whole; a failure in one lets the other finish
# and report. The suites' output may come after the VM boot's, so a failed VM scenario's digest
# (tests/vm/failure.py) is printed again after the phases' times, where a CI log is read.
PHASES := build/test-phases.txt
PHASE  := bash tools/phase.sh $(PHASES)
VM_FAILURE := build/vm-test/failure.txt
test:
	@mkdir -p build && : > $(PHASES) && rm -f $(VM_FAILURE)
	@$(PHASE) "set-up (make prepare)" $(MAKE) --no-print-directory prepare
	@$(PHASE) "lint and compat" $(MAKE) --no-print-directory lint compat
	@$(PHASE) "VM beside the suites" --last $(MAKE) --no-print-directory -j2 -O vm-boot-part suites-part || \
	  { rc=$$?; [ ! -s $(VM_FAILURE) ] || cat $(VM_FAILURE); exit $$rc; }

vm-boot-part:
	@$(PHASE) "VM scenario (vm-boot)" --part $(MAKE) --no-print-directory vm-boot
suites-part:
	@$(PHASE) "suite, Python 3.11" --part $(MAKE) --no-print-directory suite
	@$(PHASE) "suite, RHEL 9 (py39)" --part $(MAKE) --no-print-directory py39

# --- The RHEL 9 run: the whole suite again on CPython 3.9 with the library versions RHEL 9 ships
# (tests/rhel9-constraints.txt) in a second venv. Its stamp makes re-runs cost only the tests.
PYENV_ROOT ?= $(HOME)/.pyenv
PY39       ?= $(firstword $(wildcard $(PYENV_ROOT)/versions/3.9*/bin/python3.9) $(shell command -v python3.9 2>/dev/null))
VENV39     ?= .venv39
STAMP39    := $(VENV39)/.installed
RHEL9_CONSTRAINTS := tests/rhel9-constraints.txt
DEB_PACKAGES += cpio  # rpm2cpio | cpio: tests unpack the RHEL 9 RPM's payload
DEB_PACKAGES += etcd-server haproxy  # the replica tests: a real three-member etcd behind a real load balancer
# promtool checks and unit-tests deploy/prometheusrule.yaml (tests/host/test_alert_rules.py); Debian
# ships it in prometheus only (19 MB download, 96 MB installed, about 6 s; its postinst enables
# prometheus.service, which systemd then starts on :9090: `systemctl disable --now prometheus` on
# a machine that must not run it)
DEB_PACKAGES += prometheus
# make image: the wheel is built by Debian's setuptools (no pip, no index), the base by debootstrap
# (VM_DEB_PACKAGES). Its test runs the image under podman (with runc: crun refuses a host with both
# cgroup v1 and v2 mounted) and imports it into a private containerd with ctr: podman and runc 20
# MB to download, 90 MB installed; containerd 28 MB, 110 MB installed. containerd's postinst enables
# containerd.service, which systemd then starts; the test does not use it (it starts its own, on its
# own socket): `systemctl disable --now containerd` on a machine that must not run it.
DEB_PACKAGES += python3-setuptools python3-wheel podman runc containerd
# make kube-bin: Kubernetes 1.20.2 built from Debian's source package (tools/kube/build-kube-bin.sh)
DEB_PACKAGES += golang-go gcc libc6-dev rsync jq dpkg-dev patch golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev

$(STAMP39): pyproject.toml $(RHEL9_CONSTRAINTS) | sysdeps
	@test -x $(VENV39)/bin/python || $(PY39) -m venv $(VENV39)
	$(VENV39)/bin/python -m pip install -q --upgrade pip
	PIP_CONSTRAINT=$(CURDIR)/$(RHEL9_CONSTRAINTS) PIP_BUILD_CONSTRAINT=$(CURDIR)/$(RHEL9_CONSTRAINTS) \
	  $(VENV39)/bin/python -m pip install -q -e '.[test,server]' setuptools
	@touch $(STAMP39)

# No CPython 3.9 is an error, not a skip: the RHEL 9 run is part of what make test promises.
venv39:
	@if [ -z "$(PY39)" ]; then \
	  echo "error: no CPython 3.9 found for the RHEL 9 run"; \
	  echo "what to do: pyenv install 3.9, or make PY39=/path/to/python3.9"; exit 1; \
	fi
	@$(MAKE) --no-print-directory $(STAMP39) PY39="$(PY39)"

# The VM boot runs once, in `unit`; here it is deselected (not skipped), and so are the CRDs' CEL
# checks (marker cel: cel-python needs PyYAML >= 6, RHEL 9 ships 5.4; tests/conftest.py) and the
# server image's (marker image: the image runs its own Python 3.13, whatever runs the test), and
# the checks of documents, helpers, tools, manifests and packaging (marker once: tests/conftest.py),
# and the modules whose every function of agent/ the chosen ones call (marker reached:
# tests/py39_selection.json, tools/py39_reach.py; docs/development.md).
py39: venv39 kube-bin
	@$(VENV39)/bin/python -c 'import sys, importlib.metadata as m; print("py39: Python", sys.version.split()[0] + ",", ", ".join("%s %s" % (p, m.version(p)) for p in ("requests", "urllib3", "PyYAML", "gevent", "gunicorn", "tenacity", "rich", "prometheus_client", "tomli")))'
	NODE_AGENT_NO_SKIP=1 $(VENV39)/bin/pytest -q -p no:cacheprovider -m "not vm and not cel and not image and not once and not reached" $(XDIST)

# The guest image is cached outside the tree (~/.cache/node-agent-vm, or NODE_AGENT_VM_CACHE).
VM_CACHE ?= $(or $(NODE_AGENT_VM_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/node-agent-vm)
# Stage 1 of the guest (debootstrap, minutes once; then cached): tests/vm/build-base.sh.
vm-base: sysdeps
	@bash tests/vm/build-base.sh "$(VM_CACHE)"

vm-test: venv vm-base kube-bin
	NODE_AGENT_VM_TEST=1 $(VENV)/bin/pytest -q -p no:cacheprovider -m vm tests/vm

# kube-apiserver, kube-controller-manager and kube-scheduler for the tests' control plane
# (tests/helpers/kube_cluster.py), kubelet and pause for the VM guest (tests/vm/build-image.sh):
# built once from Debian 12's source package `kubernetes` with tools/kube's fixes, then cached in
# ~/.cache/node-agent-kube (NODE_AGENT_KUBE_CACHE); a cache hit downloads and builds nothing. The
# last line printed is the directory (the tests find it by the same script, `--find`).
kube-bin: sysdeps
	@bash tools/kube/build-kube-bin.sh

demo: venv
	$(PY) examples/demo.py

# Everything under ./kube-demo-run (ignored by git); every process it starts ends on Ctrl-C or kube-demo-stop.
kube-demo: venv kube-bin
	$(PY) examples/kube_demo.py

kube-demo-stop:
	$(PY) examples/kube_demo.py --stop

rpm: venv
	bash packaging/build-rpm.sh build/rpm
	bash packaging/build-rpm.sh build/rpm-el9 el9

# make image: node-config-server's container image (docs/install.md, "The image"), written to
# build/node-config-server-image.tar, a docker-archive that podman load and ctr images import read.
# Its base (Debian trixie minbase and the server's dependencies, from Debian's archive: 1 to 2.5
# minutes once, then cached in ~/.cache/node-agent-image or NODE_AGENT_IMAGE_CACHE) is image-base,
# which make prepare builds beside the VM base; the wheel's layer is rebuilt every time (seconds).
# The tests (tests/host/test_server_image.py) build it again into a temporary directory, run it
# under podman and import it into a private containerd.
IMAGE_CACHE ?= $(or $(NODE_AGENT_IMAGE_CACHE),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/node-agent-image)
image-base: sysdeps
	@bash tools/image/build-base.sh "$(IMAGE_CACHE)"

image: sysdeps
	@bash tools/image/build-image.sh build/node-config-server-image.tar "$(IMAGE_CACHE)"

bench: venv
	@$(MAKE) --no-print-directory sysdeps EXTRA_DEB="$(BENCH_DEB_PACKAGES)"
	$(PY) -m pip install -q -e '.[test,server,bench]'
	$(PY) benchmarks/run.py
	$(PY) benchmarks/plots.py

clean:
	rm -rf build dist *.egg-info .pytest_cache
