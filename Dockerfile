# syntax=docker/dockerfile:1
# denit as a distroless image, the form `make image` builds and users run: /denit (the launcher),
# /deno (the runtime) and the bundles beside them; ENTRYPOINT ["/denit", "--"]. The same image
# serves as the init container (command ["/denit", "init", "/shared"]) and as an image volume.
# Needs the npm registry. Builds for the builder's architecture (amd64 or arm64), with BuildKit
# or the classic builder:
#   docker build -t denit .
#   docker buildx build --platform linux/arm64 -t denit .   # an arm64 builder, or emulation

ARG DENO_VERSION=2.9.6

FROM node:22-bookworm AS build
ARG DENO_VERSION
WORKDIR /src
RUN case "$(uname -m)" in aarch64) arch=arm64 ;; x86_64) arch=x64 ;; \
      *) echo "denit: no build for $(uname -m): use linux/amd64 or linux/arm64" >&2; exit 1 ;; esac \
 && npm install --prefix /opt/deno --no-audit --no-fund --ignore-scripts \
      "deno@${DENO_VERSION}" "@deno/linux-${arch}-glibc@${DENO_VERSION}" \
 && cp "/opt/deno/node_modules/@deno/linux-${arch}-glibc/deno" /usr/local/bin/deno
COPY Makefile deno.json deno.lock mod.ts features.ts ./
COPY src ./src
COPY launch ./launch
COPY build ./build
COPY fixtures/cache.ts ./fixtures/
RUN make bundle DENO=/usr/local/bin/deno
# The runtime's cache for the paths the image has (its keys hold them): made at / here.
RUN cp dist/denit dist/deno dist/denit.js dist/denit-features.js dist/denit-jobs.js / \
 && /usr/local/bin/deno run --allow-all --no-config fixtures/cache.ts /

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/dist/denit /src/dist/deno /src/dist/denit.js /src/dist/denit-features.js /src/dist/denit-jobs.js /
COPY --from=build /deno-cache /deno-cache
ENTRYPOINT ["/denit", "--"]
