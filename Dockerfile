# syntax=docker/dockerfile:1
# denit as a distroless image: /denit only, ENTRYPOINT ["/denit", "--"].
#   docker build -t denit .                                   # x86_64
#   docker buildx build --platform linux/arm64 -t denit .     # aarch64 (cross-compiled)
#   docker build --build-arg DENO_VERSION=2.9.1 -t denit .
# The same image serves as the init container: command ["/denit", "init", "/shared"].

ARG DENO_VERSION=2.9.1

FROM --platform=$BUILDPLATFORM node:22-bookworm-slim AS build
ARG DENO_VERSION
ARG TARGETARCH
# DENO_TARGET overrides the target triple that TARGETARCH selects.
ARG DENO_TARGET=""
WORKDIR /src
RUN case "$(uname -m)" in aarch64) arch=arm64 ;; *) arch=x64 ;; esac \
 && npm install --prefix /opt/deno --no-audit --no-fund --ignore-scripts \
      "deno@${DENO_VERSION}" "@deno/linux-${arch}-glibc@${DENO_VERSION}" \
 && cp "/opt/deno/node_modules/@deno/linux-${arch}-glibc/deno" /usr/local/bin/deno \
 && deno --version
COPY deno.json deno.lock mod.ts init.ts ./
COPY src ./src
COPY bin/permissions ./bin/permissions
RUN target="${DENO_TARGET}"; \
    if [ -z "$target" ]; then \
      case "${TARGETARCH:-amd64}" in \
        arm64) target=aarch64-unknown-linux-gnu ;; \
        amd64) target=x86_64-unknown-linux-gnu ;; \
        *) echo "denit: no build for TARGETARCH=${TARGETARCH}: use linux/amd64 or linux/arm64" >&2; exit 1 ;; \
      esac; \
    fi \
 && deno compile $(cat bin/permissions) --no-check --frozen --target "$target" --include src/jobs/entry.ts --output /out/denit mod.ts

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/denit /denit
ENTRYPOINT ["/denit", "--"]
