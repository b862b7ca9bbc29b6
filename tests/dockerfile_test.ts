/** The Dockerfile agrees with the Makefile and bin/permissions (no Docker engine runs here). */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { ROOT } from "./helpers.ts";

const dockerfile = Deno.readTextFileSync(`${ROOT}Dockerfile`);
const makefile = Deno.readTextFileSync(`${ROOT}Makefile`);

Deno.test("Dockerfile pins the Makefile's compiling Deno, compiles with bin/permissions, ends distroless", () => {
  const pinned = /^DENO_JOBS_VERSION := (\S+)$/m.exec(makefile)?.[1];
  assertEquals(/^ARG DENO_VERSION=(\S+)$/m.exec(dockerfile)?.[1], pinned);
  assertMatch(dockerfile, /deno compile \$\(cat bin\/permissions\) .*--frozen --target "\$target"/);
  assertMatch(dockerfile, /^COPY deno\.json deno\.lock /m);
  // An architecture it has no build for stops the build with one line.
  assertMatch(dockerfile, /\*\) echo "denit: no build for TARGETARCH=/);
  // The classic builder (Debian's docker.io) has no BUILDPLATFORM and no TARGETARCH.
  assertOk(!dockerfile.includes("$BUILDPLATFORM"), "--platform=$BUILDPLATFORM needs BuildKit");
  assertMatch(dockerfile, /arch="\$\{TARGETARCH:-\$\(uname -m\)\}"/);
  // deno compile stores the build environment's OpenTelemetry setting: unset before it.
  assertMatch(dockerfile, /OTEL_.*unset "\$name"; done; \\$/m);
  assertMatch(dockerfile, /aarch64-unknown-linux-gnu/);
  assertMatch(dockerfile, /x86_64-unknown-linux-gnu/);
  const stages = dockerfile.split("\n").filter((line) => line.startsWith("FROM "));
  assertMatch(stages.at(-1) ?? "", /^FROM gcr\.io\/distroless\/cc-debian12:nonroot$/);
  assertOk(dockerfile.includes('ENTRYPOINT ["/denit", "--"]'));
  // The build context leaves out the runtime and the builds (hundreds of MB).
  const ignored = Deno.readTextFileSync(`${ROOT}.dockerignore`).split("\n");
  for (const path of [".deno/", "dist/"]) assertOk(ignored.includes(path), path);
  // Every file the build stage copies exists.
  for (const match of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
    for (const path of (match[1] ?? "").split(" ")) Deno.statSync(`${ROOT}${path}`);
  }
});
