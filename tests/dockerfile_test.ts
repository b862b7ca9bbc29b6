/** The Dockerfile agrees with the Makefile and builds the form `make image` builds (no registry here). */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { ROOT } from "./helpers.ts";
import { FORM_FILES } from "../fixtures/rootfs.ts";

const dockerfile = Deno.readTextFileSync(`${ROOT}Dockerfile`);
const makefile = Deno.readTextFileSync(`${ROOT}Makefile`);

Deno.test("Dockerfile pins the Makefile's Deno and ships the launcher form, distroless", () => {
  const pinned = /^DENO_VERSION := (\S+)$/m.exec(makefile)?.[1];
  assertEquals(/^ARG DENO_VERSION=(\S+)$/m.exec(dockerfile)?.[1], pinned);
  assertMatch(dockerfile, /^RUN make bundle DENO=\/usr\/local\/bin\/deno$/m);
  // An architecture it has no build for stops the build with one line.
  assertMatch(dockerfile, /\*\) echo "denit: no build for /);
  // The classic builder (Debian's docker.io) has no BUILDPLATFORM and no TARGETARCH.
  assertOk(!dockerfile.includes("$BUILDPLATFORM"), "--platform=$BUILDPLATFORM needs BuildKit");
  const stages = dockerfile.split("\n").filter((line) => line.startsWith("FROM "));
  assertMatch(stages.at(-1) ?? "", /^FROM gcr\.io\/distroless\/cc-debian12:nonroot$/);
  const shipped = /^COPY --from=build (.+) \/$/m.exec(dockerfile)?.[1]?.split(" ") ?? [];
  assertEquals(shipped.map((path) => path.replace("/src/dist/", "")), FORM_FILES);
  // The runtime's cache, made for the image's own paths (at / in the build stage).
  assertMatch(dockerfile, /^ && \/usr\/local\/bin\/deno run .* fixtures\/cache\.ts \/$/m);
  assertMatch(dockerfile, /^COPY --from=build \/deno-cache \/deno-cache$/m);
  assertOk(dockerfile.includes('ENTRYPOINT ["/denit", "--"]'));
  // The build context leaves out the runtime and the builds (hundreds of MB).
  const ignored = Deno.readTextFileSync(`${ROOT}.dockerignore`).split("\n");
  for (const path of [".deno/", "dist/"]) assertOk(ignored.includes(path), path);
  // Every file the build stage copies exists.
  for (const match of dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)) {
    for (const path of (match[1] ?? "").split(" ")) Deno.statSync(`${ROOT}${path}`);
  }
});
