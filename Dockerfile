# syntax=docker/dockerfile:1
# denit as a distroless image: /denit only, ENTRYPOINT ["/denit", "--"]. Needs network access to
# the npm registry and dl.deno.land (deno compile downloads its denort base binary).
#   docker build -t denit .                                   # this machine's architecture
#   docker buildx build --platform linux/arm64 -t denit .     # aarch64 (cross-compiled)
#   docker build --build-arg DENO_TARGET=aarch64-unknown-linux-gnu -t denit .  # the same, any builder
# Builds with BuildKit and with the classic builder (Debian's docker.io has no buildx): nothing
# here needs BuildKit; without TARGETARCH (classic) the target is the build machine's.
# The same image serves as the init container: command ["/denit", "init", "/shared"].
# The compile uses Deno 2.9.6, not the 2.9.1 the `deno run` form pins for PID 1: binaries that
# deno compile 2.9.0 and 2.9.1 write crash before main under gVisor and after eu-strip
# (denoland/deno#35700, #35633), their job service leaks per connection, and the compiled
# runtime has no SIGUSR1 inspector at any 2.9.x (the reason for the pin under deno run).

ARG DENO_VERSION=2.9.6

FROM node:22-bookworm-slim AS build
ARG DENO_VERSION
ARG TARGETARCH=""
# DENO_TARGET overrides the target triple that TARGETARCH (or the build machine) selects.
ARG DENO_TARGET=""
WORKDIR /src
RUN case "$(uname -m)" in aarch64) arch=arm64 ;; *) arch=x64 ;; esac \
 && npm install --prefix /opt/deno --no-audit --no-fund --ignore-scripts \
      "deno@${DENO_VERSION}" "@deno/linux-${arch}-glibc@${DENO_VERSION}" \
 && cp "/opt/deno/node_modules/@deno/linux-${arch}-glibc/deno" /usr/local/bin/deno \
 && deno --version
COPY deno.json deno.lock mod.ts init.ts features.ts ./
COPY src ./src
COPY bin/permissions ./bin/permissions
# deno compile keeps the build environment's OpenTelemetry setting in the binary: none here.
RUN for name in $(env | sed -n 's/^\(OTEL_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$name"; done; \
    target="${DENO_TARGET}"; \
    if [ -z "$target" ]; then \
      arch="${TARGETARCH:-$(uname -m)}"; \
      case "$arch" in \
        arm64|aarch64) target=aarch64-unknown-linux-gnu ;; \
        amd64|x86_64) target=x86_64-unknown-linux-gnu ;; \
        *) echo "denit: no build for TARGETARCH=${arch}: use linux/amd64 or linux/arm64" >&2; exit 1 ;; \
      esac; \
    fi \
 && deno compile $(cat bin/permissions) --no-check --frozen --target "$target" --include features.ts --include src/jobs/entry.ts --output /out/denit mod.ts

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/denit /denit
ENTRYPOINT ["/denit", "--"]
