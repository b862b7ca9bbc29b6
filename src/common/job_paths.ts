/**
 * The job service's places on disk: the socket's directory and the spool, created 0700 when
 * missing; a stale socket left by an earlier run is replaced, a live one or another file never.
 */

import { dirname } from "./paths.ts";

/** Creates `dir` (and missing parents) with mode 0700; fails if it is not a directory. */
export function prepareSpool(dir: string): void {
  Deno.mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (!Deno.statSync(dir).isDirectory) throw new Error(`"${dir}" is not a directory`);
}

/** Makes `socket` free to bind: its directory exists, and no file (or only a dead socket) is there. */
export async function prepareSocketPath(socket: string): Promise<void> {
  prepareSpool(dirname(socket));
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(socket);
  } catch (err: unknown) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  if (!info.isSocket) {
    throw new Deno.errors.AlreadyExists(`"${socket}" exists and is not a socket`);
  }
  try {
    const conn = await Deno.connect({ transport: "unix", path: socket });
    conn.close();
  } catch {
    // Nobody listens: a socket left by an earlier run, replaced.
    await Deno.remove(socket);
    return;
  }
  throw new Deno.errors.AddrInUse(`another process serves "${socket}"`);
}
