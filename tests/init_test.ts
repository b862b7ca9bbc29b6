/** `denit init`: a runnable denit (and --with files) in a directory, then run from there. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { DENIT, DENO, names, ROOT, run } from "./helpers.ts";
import { PERMISSION_FLAGS } from "../src/common/runtime.ts";

function entrypointOf(stdout: string): string[] {
  const line = stdout.split("\n").find((l) => l.startsWith("entrypoint: "));
  assertOk(line !== undefined, stdout);
  return JSON.parse(line.slice("entrypoint: ".length));
}

Deno.test("bin/permissions and the init entrypoint use the same permission flags", () => {
  const file = Deno.readTextFileSync(`${ROOT}bin/permissions`).trim().split(/\s+/);
  assertEquals(file, [...PERMISSION_FLAGS]);
});

const COMPILED = DENIT.length === 1;

Deno.test("init: the runnable denit and --with files; the copy supervises", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-init-" });
  try {
    await Deno.writeTextFile(`${dir}/extra.sh`, "#!/bin/sh\nexit 7\n", { mode: 0o755 });
    const result = await run([...DENIT, "init", `${dir}/shared`, "--with", `${dir}/extra.sh`]);
    assertEquals(result.code, 0, result.stderr);
    // The compiled binary copies itself; the bundle form its launcher as denit, the runtime,
    // the bundle, its optional half, the job service's half and the runtime it runs on. Either
    // way the entrypoint is DEST/denit.
    assertEquals(
      names(`${dir}/shared`),
      COMPILED ? ["denit", "extra.sh"] : [
        "denit",
        "denit-features.js",
        "denit-jobs.js",
        "denit.js",
        "deno",
        "deno-jobs",
        "extra.sh",
      ],
    );
    const entrypoint = entrypointOf(result.stdout);
    assertEquals(entrypoint, [`${dir}/shared/denit`, "--"]);
    for (const file of COMPILED ? ["denit"] : ["denit", "deno", "deno-jobs"]) {
      assertEquals((await Deno.stat(`${dir}/shared/${file}`)).mode! & 0o777, 0o755, file);
    }
    // Run from the copy, as a main container would: exit status and a forwarded signal.
    const exit = await run([...entrypoint, `${dir}/shared/extra.sh`], {
      env: { DENIT_SUBREAPER: "1" },
    });
    assertEquals(exit.code, 7, exit.stderr);
    const signal = await run([...entrypoint, "sh", "-c", "kill -TERM $PPID; sleep 5 & wait"], {
      env: { DENIT_SUBREAPER: "1" },
    });
    assertEquals(signal.code, 143, signal.stderr);
    // A restarted init container: nothing rewritten.
    const again = await run([...DENIT, "init", `${dir}/shared`, "--with", `${dir}/extra.sh`]);
    assertEquals(again.code, 0, again.stderr);
    assertMatch(again.stderr, new RegExp(`0 files, .*; ${COMPILED ? 2 : 7} unchanged`));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("init from source copies the runtime and the module files", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-init-src-" });
  try {
    const result = await run([DENO, "run", "-A", "--no-config", `${ROOT}init.ts`, "init", dir]);
    assertEquals(result.code, 0, result.stderr);
    const entrypoint = entrypointOf(result.stdout);
    assertEquals(entrypoint.at(-2), `${dir}/denit-src/mod.ts`);
    const exit = await run([...entrypoint, "sh", "-c", "exit 5"], {
      env: { DENIT_SUBREAPER: "1" },
    });
    assertEquals(exit.code, 5, exit.stderr);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
