/**
 * The runtime's cache that ships beside the launcher (`deno-cache`, src/copy/cache.ts): made for
 * the form's own paths, read where it is read-only and by any user, and passed over in silence
 * where it does not fit (another runtime, other paths).
 */

import { DatabaseSync } from "node:sqlite";
import { assertEquals, assertOk } from "./assert.ts";
import { denitForAnyUser, ROOT, run } from "./helpers.ts";
import { buildCache, CACHE_DIR } from "../src/copy/cache.ts";

const BUNDLES = ["denit-features.js", "denit-jobs.js", "denit.js"];

/** What a copy of a cache database answers to `sql` (the copy spares the original's files). */
async function query(database: string, sql: string): Promise<Record<string, unknown>[]> {
  const copy = await Deno.makeTempFile({ prefix: "denit-cache-db-" });
  try {
    await Deno.copyFile(database, copy);
    const db = new DatabaseSync(copy);
    const rows = db.prepare(sql).all() as Record<string, unknown>[];
    db.close();
    return rows;
  } finally {
    for (const suffix of ["", "-wal", "-shm"]) {
      await Deno.remove(`${copy}${suffix}`).catch(() => {});
    }
  }
}

async function cachedModules(cache: string): Promise<string[]> {
  const rows = await query(
    `${cache}/v8_code_cache_v2`,
    "SELECT specifier FROM codecache WHERE specifier LIKE 'file:%'",
  );
  return rows.map((row) => String(row.specifier)).sort();
}

Deno.test("dist/ and the image's root ship the cache of their own paths; the image's is sealed", async () => {
  const forms: ReadonlyArray<readonly [string, string]> = [
    [`${ROOT}dist/${CACHE_DIR}`, `${ROOT}dist/`],
    [`${ROOT}dist/rootfs/${CACHE_DIR}`, "/"],
  ];
  for (const [cache, at] of forms) {
    assertEquals(await cachedModules(cache), BUNDLES.map((name) => `file://${at}${name}`));
  }
  // Read-only where it ships, a reader needs the log and its index beside each database, and
  // nothing pending in them (dist/'s is written by the runs of a checkout).
  const image = `${ROOT}dist/rootfs/${CACHE_DIR}`;
  for (const db of ["dep_analysis_cache_v2", "v8_code_cache_v2"]) {
    assertEquals((await Deno.stat(`${image}/${db}-wal`)).size, 0, `${image}/${db}-wal`);
    assertEquals((await Deno.stat(`${image}/${db}-shm`)).size, 0, `${image}/${db}-shm`);
    assertEquals((await Deno.stat(`${image}/${db}`)).mode! & 0o777, 0o644);
  }
});

/** strace's lines for a run of `argv` as uid 65534 (`ro`: the cache mounted read-only). */
async function traced(dir: string, argv: readonly string[]): Promise<string> {
  const traces = await Deno.makeTempDir({ dir, prefix: "trace-" });
  await Deno.chmod(traces, 0o777);
  const result = await run([
    ...["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"],
    ...["strace", "-ff", "-qq", "-o", `${traces}/t`, "-e", "trace=openat,pread64,pwrite64"],
    ...argv,
  ]);
  assertEquals([result.code, result.stdout, result.stderr], [0, "ran\n", ""]);
  // One file a thread: no call is cut in two by another's.
  const files = await Array.fromAsync(Deno.readDir(traces), (e) => `${traces}/${e.name}`);
  return (await Promise.all(files.map((file) => Deno.readTextFile(file)))).join("\n");
}

/**
 * A copy of the form readable by every user, in `dir`, with its cache made by `fill`, mounted
 * read-only while `use` runs with the launcher's path.
 */
async function readOnlyForm(
  dir: string,
  fill: (form: string) => Promise<void>,
  use: (denit: string) => Promise<void>,
): Promise<void> {
  const [denit = ""] = await denitForAnyUser(dir);
  const form = denit.slice(0, denit.lastIndexOf("/"));
  await fill(form);
  const cache = `${form}/${CACHE_DIR}`;
  assertEquals((await run(["mount", "--bind", cache, cache])).code, 0);
  try {
    assertEquals((await run(["mount", "-o", "remount,ro,bind", cache])).code, 0);
    await use(denit);
  } finally {
    await run(["umount", cache]);
  }
}

Deno.test({
  name: "read-only and as another user, the cache is read and nothing is written to it",
  ignore: Deno.uid() !== 0,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-cache-" });
    await Deno.chmod(dir, 0o777);
    try {
      await readOnlyForm(dir, buildCache, async (denit) => {
        const lines = (await traced(dir, [denit, "-s", "--", "echo", "ran"])).split("\n");
        // The code cache opened read-only (writing it fails) and read from.
        const opened = lines.map((line) =>
          /openat\(AT_FDCWD, "[^"]*\/v8_code_cache_v2", O_RDONLY[^)]*\) = (\d+)/.exec(line)?.[1]
        ).find((fd) => fd !== undefined);
        assertOk(opened !== undefined, lines.filter((l) => l.includes(CACHE_DIR)).join("\n"));
        assertOk(lines.some((line) => line.includes(`pread64(${opened},`)), "never read");
        assertOk(!lines.some((line) => /pwrite64\(/.test(line)), "written");
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "a cache of another runtime version at other paths is passed over in silence, on a terminal too",
  ignore: Deno.uid() !== 0,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "denit-cache-" });
    await Deno.chmod(dir, 0o777);
    try {
      // dist/'s cache: keys for dist/'s paths, and marked as another runtime's.
      const foreign = async (form: string) => {
        await run(["cp", "-a", `${ROOT}dist/${CACHE_DIR}`, form]);
        for (const db of ["dep_analysis_cache_v2", "node_analysis_cache_v2", "v8_code_cache_v2"]) {
          const connection = new DatabaseSync(`${form}/${CACHE_DIR}/${db}`);
          connection.exec("UPDATE info SET value = '2.0.0' WHERE key = 'CLI_VERSION'");
          connection.close();
          for (const suffix of ["-wal", "-shm"]) {
            await Deno.writeFile(`${form}/${CACHE_DIR}/${db}${suffix}`, new Uint8Array());
          }
        }
      };
      await readOnlyForm(dir, foreign, async (denit) => {
        const shown = await run(["script", "-qec", `${denit} -s -- echo ran`, "/dev/null"]);
        assertEquals([shown.code, shown.stdout.replaceAll("\r", "")], [0, "ran\n"]);
        await traced(dir, [denit, "-s", "--", "echo", "ran"]);
      });
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
