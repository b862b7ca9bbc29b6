# denit: everything goes through the project's own Deno, installed from the npm registry.
SHELL := /bin/bash
# PID 1 of the `deno run` form runs on 2.9.1: 2.9.2 and later open a V8 inspector on SIGUSR1
# under `deno run`. deno compile and the job service's process run on DENO_JOBS_VERSION: its
# compiled binaries start under gVisor, and its networking does not leak per connection.
DENO_VERSION := 2.9.1
DENO_JOBS_VERSION := 2.9.6
ARCH := $(shell uname -m)
NPM_ARCH := $(if $(filter aarch64 arm64,$(ARCH)),arm64,x64)
DENO_HOME := $(CURDIR)/.deno
DENO := $(DENO_HOME)/bin/deno
DENO_JOBS := $(DENO_HOME)/bin/deno-jobs
export DENO_DIR := $(DENO_HOME)/cache
export DENO_NO_UPDATE_CHECK := 1
# The permissions of the compiled binary and of bin/denit (one list, read by both).
PERMS := $(shell cat bin/permissions)
SOURCES := $(shell find mod.ts init.ts features.ts src -name '*.ts')

.PHONY: setup bundle compile demo test test-compiled fmt lint check unit clean rootfs bench image
# The denit the process-level tests run: unset for the bundle on the project's runtime, or an
# executable (make test DENIT_EXE=dist/denit).
ifneq ($(DENIT_EXE),)
export DENIT_EXE
endif
# deno compile's target: the machine's own, or aarch64 / x86_64 (a cross-compile).
TARGET ?=
TARGET_TRIPLE = $(if $(filter aarch64 arm64,$(TARGET)),aarch64-unknown-linux-gnu,$(if $(filter x86_64 amd64,$(TARGET)),x86_64-unknown-linux-gnu,))

setup: $(DENO) $(DENO_JOBS)

# One runtime from the npm registry: $(call runtime,VERSION,TARGET).
define runtime
	@command -v npm >/dev/null || { echo "make setup: npm is needed to fetch Deno" >&2; exit 1; }
	mkdir -p $(DENO_HOME)/npm-$(1) $(DENO_HOME)/bin
	cd $(DENO_HOME)/npm-$(1) && echo '{"private":true}' > package.json && \
	  npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
	    deno@$(1) @deno/linux-$(NPM_ARCH)-glibc@$(1)
	cp $(DENO_HOME)/npm-$(1)/node_modules/@deno/linux-$(NPM_ARCH)-glibc/deno $(2).tmp
	chmod 755 $(2).tmp && mv $(2).tmp $(2)
	$(2) --version | head -1
endef

$(DENO):
	$(call runtime,$(DENO_VERSION),$(DENO))

$(DENO_JOBS):
	$(call runtime,$(DENO_JOBS_VERSION),$(DENO_JOBS))

bundle: dist/denit.js dist/denit-features.js dist/denit-jobs.js dist/denit-launch

# The bundle form's /denit: a small C launcher that starts the runtime on the bundle beside it
# (launch/denit.c). Static, so that it needs nothing but itself where it is copied to.
dist/denit-launch: launch/denit.c
	@command -v gcc >/dev/null || { echo "make: gcc (and libc6-dev) builds denit's launcher" >&2; exit 1; }
	mkdir -p dist
	gcc -O2 -Wall -Wextra -Werror -static -o dist/denit-launch.tmp launch/denit.c
	mv dist/denit-launch.tmp dist/denit-launch

# The functions a plain start calls are then marked for V8 to compile at once, so that the
# runtime's code cache keeps them (build/eager.ts: it runs the bundle once to find them).
dist/denit.js: $(DENO) $(SOURCES) deno.json build/eager.ts
	mkdir -p dist
	$(DENO) bundle --quiet --platform=deno --minify mod.ts -o dist/denit-lazy.js
	$(DENO) run --allow-all build/eager.ts dist/denit-lazy.js dist/denit.js.tmp
	rm dist/denit-lazy.js
	mv dist/denit.js.tmp dist/denit.js

# The optional half, beside the bundle: copy mode, the probe, the bridge and the health
# endpoint, loaded only when one of them runs (features.ts).
dist/denit-features.js: $(DENO) $(SOURCES) deno.json
	mkdir -p dist
	$(DENO) bundle --quiet --platform=deno --minify features.ts -o dist/denit-features.js.tmp
	mv dist/denit-features.js.tmp dist/denit-features.js

# The job service's gRPC half, beside the bundle: loaded only with --jobs-socket or `denit job`.
dist/denit-jobs.js: $(DENO) $(SOURCES) deno.json
	mkdir -p dist
	$(DENO) bundle --quiet --platform=deno --minify src/jobs/entry.ts -o dist/denit-jobs.js.tmp
	mv dist/denit-jobs.js.tmp dist/denit-jobs.js

# Needs Deno's denort base binary: downloaded by deno, or given with DENORT_BIN=/path/denort.
compile: $(DENO_JOBS) $(SOURCES)
	@[ -z "$(TARGET)" ] || [ -n "$(TARGET_TRIPLE)" ] || { \
	  echo "make compile: unknown TARGET=$(TARGET): use x86_64 or aarch64" >&2; exit 2; }
	mkdir -p dist
	env $$(env | sed -n 's/^\(OTEL_[A-Za-z0-9_]*\)=.*/-u \1/p') \
	  $(DENO_JOBS) compile $(PERMS) --no-check $(if $(TARGET_TRIPLE),--target $(TARGET_TRIPLE),) \
	  --include features.ts --include src/jobs/entry.ts --output dist/denit mod.ts 2>dist/compile.log || { \
	  if grep -q "denort" dist/compile.log; then \
	    echo "make compile: deno compile could not get its denort base binary (dl.deno.land) for" \
	      "Deno $(DENO_JOBS_VERSION): allow that download, or set DENORT_BIN=/path/to/denort" >&2; \
	  else cat dist/compile.log >&2; fi; exit 1; }

# The whole suite against the compiled binary: the same tests as make test.
test-compiled: compile
	$(MAKE) test DENIT_EXE=$(CURDIR)/dist/denit

# The shell-less stand-in for the distroless image: Deno, its libraries, the bundle.
rootfs: bundle $(DENO_JOBS)
	$(DENO) run --allow-all --no-config fixtures/rootfs.ts denit dist/rootfs $(DENO) dist/denit.js \
	  $(if $(DENIT_EXE),$(DENIT_EXE),dist/denit-launch) $(DENO_JOBS)
	@echo "dist/rootfs: $$(find dist/rootfs -type f | wc -l) files, no shell"

# A local image `denit` of the rootfs form (no deno compile needed): with docker, else podman.
ENGINE ?= $(shell command -v docker >/dev/null && docker info >/dev/null 2>&1 && echo docker || echo podman)
image: rootfs
	$(ENGINE) build -q -t denit -f launch/rootfs.Dockerfile dist/rootfs

# Installs the baselines and tools it needs, then measures everything in one run (about 10 min).
bench: rootfs
	@command -v tini >/dev/null && command -v dumb-init >/dev/null && command -v catatonit >/dev/null \
	  && command -v wrk >/dev/null && command -v gcc >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tini dumb-init catatonit wrk gcc >/dev/null; }
	mkdir -p bench/out
	gcc -O2 -Wall -Wextra -o bench/out/probe bench/probe.c
	$(DENO) run --allow-all --no-config bench/run.ts $(CURDIR)/bench/out/probe $(DENO) \
	  $(CURDIR)/dist/denit.js $(CURDIR)/bench/out $(BENCH_FLAGS)

demo: bundle
	bin/demo

fmt: $(DENO)
	$(DENO) fmt --check

lint: $(DENO)
	$(DENO) lint

check: $(DENO)
	$(DENO) check mod.ts init.ts features.ts src/ tests/ fixtures/ bench/ build/

test: setup bundle rootfs fmt lint check
	$(DENO) test --allow-all --no-prompt tests/

clean:
	rm -rf dist
