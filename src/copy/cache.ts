/**
 * The runtime's cache beside the launcher (`deno-cache`): its keys hold the modules' paths, so it
 * is made where it runs, then each SQLite database is sealed for read-only use (empty -wal/-shm).
 */

import { DatabaseSync } from "node:sqlite";

/** The cache's name beside the launcher. */
export const CACHE_DIR = "deno-cache";

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Folds each database's log in and leaves what a read-only reader needs, readable by all. */
export function seal(cache: string): void {
  for (const entry of Deno.readDirSync(cache)) {
    if (!entry.isFile || !/_v\d+$/.test(entry.name)) continue;
    const path = `${cache}/${entry.name}`;
    const db = new DatabaseSync(path);
    db.exec("PRAGMA optimize; ANALYZE; PRAGMA wal_checkpoint(TRUNCATE);");
    db.close();
    for (const suffix of ["-wal", "-shm", ""]) {
      if (suffix !== "") Deno.writeFileSync(`${path}${suffix}`, new Uint8Array());
      Deno.chmodSync(`${path}${suffix}`, 0o644);
    }
  }
  Deno.chmodSync(cache, 0o755);
}

/** Makes the cache of the launcher in `dir` (with `root`: inside that root, chrooted). */
export async function buildCache(at: string, root = ""): Promise<void> {
  const dir = at.replace(/\/+$/, ""); // "/" is ""
  const cache = `${root}${dir}/${CACHE_DIR}`;
  await Deno.remove(cache, { recursive: true }).catch(() => {}); // one made before, if any
  await Deno.mkdir(cache);
  const scratch = root === "" ? await Deno.makeTempDir({ prefix: "denit-cache-" }) : "/tmp/.c";
  if (root !== "") await Deno.mkdir(`${root}${scratch}`, { mode: 0o700 });
  const denit = `${dir}/denit`;
  const socket = `${scratch}/j.sock`;
  const runs = [
    [denit, "-s", "--health-addr", `127.0.0.1:${freePort()}`, "--", denit, "--version"],
    [denit, "-s", "--jobs-socket", socket, "--jobs-spool", `${scratch}/spool`, "--"]
      .concat([denit, "job", "--socket", socket, "list"]),
    [denit, "copy", `${dir}/denit-features.js`, `${scratch}/copied`],
  ];
  try {
    for (const argv of runs) {
      const [program = "", ...args] = root === "" ? argv : [
        ...["unshare", "--mount", "--fork", "sh", "-c"],
        'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"',
        root,
        ...argv,
      ];
      const out = await new Deno.Command(program, { args, stdout: "null", stderr: "piped" })
        .output();
      if (!out.success) {
        throw new Error(`${argv.join(" ")}: ${new TextDecoder().decode(out.stderr).trim()}`);
      }
    }
    seal(cache);
  } catch (err: unknown) {
    await Deno.remove(cache, { recursive: true }).catch(() => {}); // none rather than half
    throw err;
  } finally {
    await Deno.remove(`${root}${scratch}`, { recursive: true }).catch(() => {});
  }
}
