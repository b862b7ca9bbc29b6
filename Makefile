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
SOURCES := $(shell find mod.ts features.ts src -name '*.ts') proto/denit/jobs/v1/jobs.proto

.PHONY: setup bundle demo test fmt lint check clean rootfs bench image bundle-arm64 rootfs-arm64 image-arm64

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
# (dist/denit, which bin/denit links to), the runtime beside it, the bundle and its two halves,
# and the runtime's cache for these paths (src/copy/cache.ts).
FORM := dist/denit dist/deno dist/denit.js dist/denit-features.js dist/denit-jobs.js
bundle: $(FORM) dist/deno-cache/v8_code_cache_v2

dist/deno-cache/v8_code_cache_v2: $(FORM) fixtures/cache.ts
	$(DENO) run --allow-all --no-config fixtures/cache.ts $(CURDIR)/dist

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

# The functions a plain start calls are then marked for V8 to compile at once, so that the
# shipped code cache keeps them (build/eager.ts: it runs the bundle once to find them).
dist/denit.js: $(DENO) $(SOURCES) deno.json build/eager.ts $(wildcard launch/*.c launch/*.h)
	$(call bundle,mod.ts,dist/denit-lazy.js)
	$(DENO) run --allow-all build/eager.ts dist/denit-lazy.js $@.tmp
	rm dist/denit-lazy.js
	mv $@.tmp $@

# The optional half: copy mode, the probe, the bridge and the health endpoint (features.ts).
dist/denit-features.js: $(DENO) $(SOURCES) deno.json
	$(call bundle,features.ts,$@)

# The job service's gRPC half: loaded only with --jobs-socket or `denit job`.
dist/denit-jobs.js: $(DENO) $(SOURCES) deno.json
	$(call bundle,src/jobs/entry.ts,$@)

# The shell-less stand-in for the distroless image: the files of dist/ and the runtime's libraries.
rootfs: bundle
	$(DENO) run --allow-all --no-config fixtures/rootfs.ts denit dist/rootfs dist
	$(DENO) run --allow-all --no-config fixtures/cache.ts --root $(CURDIR)/dist/rootfs
	@echo "dist/rootfs: $$(find dist/rootfs -type f | wc -l) files, no shell"

# A local image of the rootfs form (no deno compile needed), tagged $(IMAGE): with docker, else podman.
ENGINE ?= $(shell command -v docker >/dev/null && docker info >/dev/null 2>&1 && echo docker || echo podman)
IMAGE ?= denit
image: rootfs
	$(ENGINE) build -q -t $(IMAGE) -f launch/rootfs.Dockerfile dist/rootfs

# arm64 from an x86_64 machine: the registry's aarch64 runtime, the launcher cross-built
# (gcc-aarch64-linux-gnu), the same bundles, laid out in dist/arm64/ as dist/ is. The image
# `denit:arm64` runs where qemu-user is registered with binfmt_misc (tests/arm64_test.ts).
DENO_ARM64 := $(DENO_HOME)/bin/deno-$(DENO_VERSION)-arm64
ARM64_FORM := dist/arm64/denit dist/arm64/deno $(addprefix dist/arm64/,denit.js denit-features.js denit-jobs.js)
bundle-arm64: $(ARM64_FORM)

$(DENO_ARM64):
	@command -v npm >/dev/null || { echo "make: npm is needed to fetch Deno" >&2; exit 1; }
	mkdir -p $(DENO_HOME)/npm-arm64 $(DENO_HOME)/bin
	cd $(DENO_HOME)/npm-arm64 && echo '{"private":true}' > package.json && \
	  npm install --no-audit --no-fund --ignore-scripts --loglevel=error --force --cpu=arm64 \
	    @deno/linux-arm64-glibc@$(DENO_VERSION)
	cp $(DENO_HOME)/npm-arm64/node_modules/@deno/linux-arm64-glibc/deno $@.tmp
	chmod 755 $@.tmp && mv $@.tmp $@

dist/arm64/denit: $(wildcard launch/*.c launch/*.h)
	@command -v aarch64-linux-gnu-gcc >/dev/null || { echo "make: gcc-aarch64-linux-gnu builds the arm64 launcher" >&2; exit 1; }
	mkdir -p dist/arm64
	aarch64-linux-gnu-gcc -O2 -Wall -Wextra -Werror -static -o $@.tmp launch/*.c
	mv $@.tmp $@

dist/arm64/deno: $(DENO_ARM64)
	mkdir -p dist/arm64
	ln -f $< $@ 2>/dev/null || cp $< $@

dist/arm64/%.js: dist/%.js
	mkdir -p dist/arm64
	ln -f $< $@ 2>/dev/null || cp $< $@

rootfs-arm64: bundle-arm64
	$(DENO) run --allow-all --no-config fixtures/rootfs.ts denit dist/arm64/rootfs dist/arm64

image-arm64: rootfs-arm64
	$(ENGINE) build -q --platform linux/arm64 -t denit:arm64 -f launch/rootfs.Dockerfile dist/arm64/rootfs

# Measures everything in one run (about 10 min) against the baselines, which it needs installed.
BENCH_TOOLS := tini dumb-init catatonit wrk gcc
bench: rootfs
	@missing="$(foreach t,$(BENCH_TOOLS),$(if $(shell command -v $(t)),,$(t)))"; [ -z "$${missing// }" ] || \
	  { echo "make bench: install$$missing first (Debian packages of the same names)" >&2; exit 2; }
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
	$(DENO) check mod.ts features.ts src/ tests/ fixtures/ bench/ build/

# The arm64 lane (tests/arm64_test.ts) needs the aarch64 runtime; its image test, the launcher.
ARM64_LANE := $(DENO_ARM64) $(if $(and $(shell command -v aarch64-linux-gnu-gcc),$(shell command -v qemu-aarch64-static)),rootfs-arm64)
test: setup bundle rootfs $(ARM64_LANE) fmt lint check
	$(DENO) test --allow-all --no-prompt tests/

clean:
	rm -rf dist
