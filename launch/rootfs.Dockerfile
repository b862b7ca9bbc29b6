# The rootfs form of denit as an image (`make image`): dist/rootfs, from scratch. No shell, no
# coreutils: the runtime, its C libraries, the bundle and /denit, the launcher that starts it.
# Builds with BuildKit and with the classic builder (nothing here needs either's extras).
FROM scratch
COPY . /
ENTRYPOINT ["/denit", "--"]
