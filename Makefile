# denit: everything goes through the project's own Deno, installed from the npm registry.
SHELL := /bin/bash
# The one runtime, for PID 1, the job service and every subcommand (tests/readme_test.ts
# compares it with the registry's newest when the registry answers).
DENO_VERSION := 2.9.6
ARCH := $(shell uname -m)
NPM_ARCH := $(if $(filter aarch64 arm64,$(ARCH)),arm64,x64)
DENO_HOME := $(CURDIR)/.deno
DENO := $(DENO_HOME)/bin/deno-$(DENO_VERSION)
export DENO_DIR := $(DENO_HOME)/cache
export DENO_NO_UPDATE_CHECK := 1
SOURCES := $(shell find mod.ts features.ts src -name '*.ts')

.PHONY: setup bundle demo test fmt lint check clean rootfs bench image

setup: $(DENO)

$(DENO):
	@command -v npm >/dev/null || { echo "make setup: npm is needed to fetch Deno" >&2; exit 1; }
	mkdir -p $(DENO_HOME)/npm $(DENO_HOME)/bin
	cd $(DENO_HOME)/npm && echo '{"private":true}' > package.json && \
	  npm install --no-audit --no-fund --ignore-scripts --loglevel=error \
	    deno@$(DENO_VERSION) @deno/linux-$(NPM_ARCH)-glibc@$(DENO_VERSION)
	cp $(DENO_HOME)/npm/node_modules/@deno/linux-$(NPM_ARCH)-glibc/deno $(DENO).tmp
	chmod 755 $(DENO).tmp && mv $(DENO).tmp $(DENO)
	$(DENO) --version | head -1

# The form users run, laid out in dist/ as in the image and in `denit init`'s copy: the launcher
# (dist/denit, which bin/denit links to), the runtime beside it, the bundle and its two halves.
bundle: dist/denit dist/deno dist/denit.js dist/denit-features.js dist/denit-jobs.js

# Static, so that it needs nothing but itself where it is copied to.
dist/denit: $(wildcard launch/*.c launch/*.h)
	@command -v gcc >/dev/null || { echo "make: gcc (and libc6-dev) builds denit's launcher" >&2; exit 1; }
	mkdir -p dist
	gcc -O2 -Wall -Wextra -Werror -static -o dist/denit.tmp launch/*.c
	mv dist/denit.tmp dist/denit

dist/deno: $(DENO)
	mkdir -p dist
	ln -f $(DENO) dist/deno 2>/dev/null || cp $(DENO) dist/deno

# $(call bundle,ENTRY,OUT)
define bundle
	mkdir -p dist
	$(DENO) bundle --quiet --platform=deno --minify $(1) -o $(2).tmp
	mv $(2).tmp $(2)
endef

dist/denit.js: $(DENO) $(SOURCES) deno.json
	$(call bundle,mod.ts,$@)

# The optional half: copy mode, the probe, the bridge and the health endpoint (features.ts).
dist/denit-features.js: $(DENO) $(SOURCES) deno.json
	$(call bundle,features.ts,$@)

# The job service's gRPC half: loaded only with --jobs-socket or `denit job`.
dist/denit-jobs.js: $(DENO) $(SOURCES) deno.json
	$(call bundle,src/jobs/entry.ts,$@)

# The shell-less stand-in for the distroless image: the files of dist/ and the runtime's libraries.
rootfs: bundle
	$(DENO) run --allow-all --no-config fixtures/rootfs.ts denit dist/rootfs dist
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
	  $(CURDIR)/dist/denit $(CURDIR)/bench/out $(BENCH_FLAGS)

demo: bundle
	bin/demo

fmt: $(DENO)
	$(DENO) fmt --check

lint: $(DENO)
	$(DENO) lint

check: $(DENO)
	$(DENO) check mod.ts features.ts src/ tests/ fixtures/ bench/

test: setup bundle rootfs fmt lint check
	$(DENO) test --allow-all --no-prompt tests/

clean:
	rm -rf dist
