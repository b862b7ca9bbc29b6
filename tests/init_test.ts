/** `denit init`: a runnable denit (and --with files) in a directory, then run from there. */

import { assertEquals, assertMatch, assertOk } from "./assert.ts";
import { DENIT, names, run } from "./helpers.ts";
import { DatabaseSync } from "node:sqlite";

/** The modules of DEST whose compiled code its runtime cache holds (read from a copy of it). */
async function cachedModules(dest: string): Promise<string[]> {
  const copy = await Deno.makeTempFile({ prefix: "denit-init-cache-" });
  try {
    await Deno.copyFile(`${dest}/deno-cache/v8_code_cache_v2`, copy);
    const db = new DatabaseSync(copy);
    const rows = db.prepare("SELECT specifier FROM codecache WHERE specifier LIKE 'file:%'").all();
    db.close();
    return rows.map((row) => String(row.specifier)).sort();
  } finally {
    await Deno.remove(copy);
    await Deno.remove(`${copy}-wal`).catch(() => {});
    await Deno.remove(`${copy}-shm`).catch(() => {});
  }
}

function entrypointOf(stdout: string): string[] {
  const line = stdout.split("\n").find((l) => l.startsWith("entrypoint: "));
  assertOk(line !== undefined, stdout);
  return JSON.parse(line.slice("entrypoint: ".length));
}

Deno.test("init: the runnable denit and --with files; the copy supervises", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-init-" });
  try {
    await Deno.writeTextFile(`${dir}/extra.sh`, "#!/bin/sh\nexit 7\n", { mode: 0o755 });
    const result = await run([...DENIT, "init", `${dir}/shared`, "--with", `${dir}/extra.sh`]);
    assertEquals(result.code, 0, result.stderr);
    // The launcher as denit, the runtime, the bundle, its optional half and the job service's
    // half, and the runtime's cache made for DEST's paths: the entrypoint is DEST/denit.
    assertEquals(
      names(`${dir}/shared`),
      ["denit", "denit-features.js", "denit-jobs.js", "denit.js", "deno", "deno-cache", "extra.sh"],
    );
    assertEquals(
      await cachedModules(`${dir}/shared`),
      ["denit-features.js", "denit-jobs.js", "denit.js"].map((f) => `file://${dir}/shared/${f}`),
    );
    const entrypoint = entrypointOf(result.stdout);
    assertEquals(entrypoint, [`${dir}/shared/denit`, "--"]);
    for (const file of ["denit", "deno"]) {
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
    assertMatch(again.stderr, /0 files, .*; 6 unchanged/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

const STRACE = new Deno.Command("strace", { args: ["-V"], stdout: "null" }).outputSync().success;

async function digest(path: string): Promise<string> {
  const bytes = new Uint8Array(await crypto.subtle.digest("SHA-256", await Deno.readFile(path)));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

Deno.test({
  name:
    "init: a run killed halfway leaves nothing of denit's in DEST; the next completes DEST, the one after changes nothing",
  ignore: !STRACE, // strace kills the run at a chosen system call
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-init-" });
    const dest = `${dir}/shared`;
    const form = ["denit", "denit-features.js", "denit-jobs.js", "denit.js", "deno"];
    const from = DENIT[0]?.slice(0, DENIT[0].lastIndexOf("/")) ?? "";
    try {
      // SIGKILL at the second copy_file_range: one file written, the next one half-way.
      const killed = await run([
        ...["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=copy_file_range"],
        ...["-e", "inject=copy_file_range:signal=SIGKILL:when=2", ...DENIT, "init", dest],
      ]);
      assertEquals(killed.code, 137, killed.stderr);
      // What it copied is in its staging directory; nothing of denit's is in DEST yet.
      const left = names(dest);
      assertOk(left.some((name) => /^\.denit-init-[0-9a-f]{8}$/.test(name)), left.join(" "));
      assertEquals(left.filter((name) => form.includes(name)), [], left.join(" "));
      const again = await run([...DENIT, "init", dest]);
      assertEquals(again.code, 0, again.stderr);
      assertEquals(names(dest), [...form, "deno-cache"]);
      for (const name of form) {
        assertEquals(await digest(`${dest}/${name}`), await digest(`${from}/${name}`), name);
      }
      const third = await run([...DENIT, "init", dest]);
      assertEquals(third.code, 0, third.stderr);
      assertMatch(third.stderr, /0 files, .*; 5 unchanged/);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "init: a volume too small for the new denit keeps the previous one whole, or gets none (no half install)",
  ignore: Deno.uid() !== 0,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-init-full-" });
    const form = ["denit", "denit-features.js", "denit-jobs.js", "denit.js", "deno"];
    try {
      for (const [size, previous] of [["1m", false], ["150m", true]] as const) {
        const mounted = await run(["mount", "-t", "tmpfs", "-o", `size=${size}`, "tmpfs", dir]);
        assertEquals(mounted.code, 0, mounted.stderr);
        try {
          await Deno.mkdir(`${dir}/shared`);
          const digests: string[] = [];
          if (previous) {
            // A complete denit there, whose runtime differs from the new one (its time): the
            // new one cannot be staged beside it.
            assertEquals((await run([...DENIT, "init", `${dir}/shared`])).code, 0);
            await Deno.utime(`${dir}/shared/deno`, 0, 0);
            for (const name of form) digests.push(await digest(`${dir}/shared/${name}`));
          }
          const result = await run([...DENIT, "init", `${dir}/shared`]);
          assertEquals(result.code, 1, result.stderr);
          assertMatch(
            result.stderr,
            /^denit init: Cannot write ".*\/deno": No space left on device\n$/,
          );
          assertEquals(names(`${dir}/shared`), previous ? [...form, "deno-cache"] : []);
          for (const [i, name] of (previous ? form : []).entries()) {
            assertEquals(await digest(`${dir}/shared/${name}`), digests[i], name);
          }
        } finally {
          await run(["umount", dir]);
        }
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
