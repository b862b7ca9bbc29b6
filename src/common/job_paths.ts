/**
 * The job service's places on disk: the socket's directory and the spool. Each is trusted only
 * if no other user can change what denit finds there (as ssh treats its directories): every
 * directory on the way, links followed, belongs to root or to denit's user and is writable by
 * no one else (a sticky one such as /tmp excepted, where others cannot move what is not theirs),
 * and the directory itself belongs to denit's user and is writable by no one else. Missing ones
 * are created 0700. A stale socket left by an earlier run is replaced, a live one or another
 * file never.
 */

import { dirname } from "./paths.ts";
import { readProcStat } from "./proc.ts";
import { errorLine } from "./errors.ts";

/** Where `denit job` and `denit bridge` look for the service unless told (the README's path). */
export const DEFAULT_JOBS_SOCKET = "/run/denit/jobs.sock";

/** Jobs by outcome, for /status and /metrics: the service keeps them in COUNTS_FILE. */
export interface JobCounts {
  readonly running: number;
  readonly started: number;
  readonly succeeded: number;
  readonly failed: number;
  readonly cancelled: number;
}

/**
 * The directory of one run of denit in the spool, named by denit's pid and start time (so that
 * a pid used again by a later run is another directory).
 */
export function runDirectory(spool: string, pid: number): string {
  return `${spool}/denit-${pid}-${readProcStat(pid).field(22) || "0"}`;
}

/** The run directory's file of job counts (JSON, a JobCounts), written by the service. */
export const COUNTS_FILE = "counts.json";
/**
 * Made in the run's directory when denit starts to stop, before the stop reaches the main child:
 * the service reads it at each Run, so that no Run slips in ahead of the signal that says so.
 */
export const STOPPING_FILE = "stopping";

/** Links followed on one walk before it is called a loop (the kernel's MAXSYMLINKS). */
const MAX_LINKS = 40;
const STICKY = 0o1000;
const GROUP_OR_OTHER_WRITE = 0o022;

function owner(info: Deno.FileInfo): number {
  return info.uid ?? -1;
}

/** Refuses what another user than root or `uid` could change. */
function check(path: string, info: Deno.FileInfo, uid: number, last: boolean): void {
  const mode = info.mode ?? 0;
  if (owner(info) !== 0 && owner(info) !== uid) {
    throw new Error(
      `"${path}" belongs to uid ${owner(info)}, not to denit's user (uid ${uid}) or root`,
    );
  }
  if (info.isSymlink) return;
  if (last && owner(info) !== uid) {
    throw new Error(`"${path}" belongs to uid ${owner(info)}, not to uid ${uid}`);
  }
  if ((mode & GROUP_OR_OTHER_WRITE) !== 0 && (last || (mode & STICKY) === 0)) {
    const octal = (mode & 0o7777).toString(8).padStart(4, "0");
    throw new Error(`"${path}" is writable by other users (mode ${octal})`);
  }
}

/**
 * Walks `dir` one component at a time, following links by hand so that each link and each
 * directory met is checked: returns the real path of the part that exists and the components
 * still missing.
 */
function walk(dir: string, uid: number): { at: string; missing: string[] } {
  const pending = dir.split("/").filter((name) => name !== "" && name !== ".").reverse();
  let at = "/";
  check(at, Deno.lstatSync(at), uid, pending.length === 0);
  for (let links = 0; pending.length > 0;) {
    const name = pending.pop() as string; // the loop's condition says there is one
    if (name === "..") {
      at = at.slice(0, at.lastIndexOf("/")) || "/";
      continue;
    }
    const next = at === "/" ? `/${name}` : `${at}/${name}`;
    let info: Deno.FileInfo;
    try {
      info = Deno.lstatSync(next);
    } catch (err: unknown) {
      if (err instanceof Deno.errors.NotFound) return { at, missing: [name, ...pending.reverse()] };
      throw err;
    }
    if (info.isSymlink) {
      check(next, info, uid, false);
      if (++links > MAX_LINKS) throw new Error(`"${dir}": too many levels of links`);
      const target = Deno.readLinkSync(next);
      if (target.startsWith("/")) at = "/";
      pending.push(...target.split("/").filter((n) => n !== "" && n !== ".").reverse());
      continue;
    }
    if (!info.isDirectory) throw new Error(`"${next}" is not a directory`);
    check(next, info, uid, pending.length === 0);
    at = next;
  }
  return { at, missing: [] };
}

/**
 * Makes `dir` ready for denit's own files: created 0700 where missing, refused where another
 * user could change it (the error, after `label`, names the place and why).
 */
export function prepareTrustedDirectory(dir: string, label: string): void {
  try {
    prepareDirectory(dir);
  } catch (err: unknown) {
    throw new Error(`${label} ${errorLine(err)}`, { cause: err });
  }
}

function prepareDirectory(dir: string): void {
  const uid = Deno.uid() ?? 0;
  const { at, missing } = walk(dir, uid);
  let made = at;
  for (const name of missing) {
    made = made === "/" ? `/${name}` : `${made}/${name}`;
    try {
      Deno.mkdirSync(made, { mode: 0o700 });
    } catch (err: unknown) {
      // Made meanwhile by someone else: walked again below, so trusted only if it may be.
      if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
    }
  }
  if (missing.length > 0) walk(dir, uid);
}

/** Makes `socket` free to bind: its directory trusted, and no file (or only a dead socket) there. */
export async function prepareSocketPath(socket: string): Promise<void> {
  prepareTrustedDirectory(dirname(socket), "socket directory:");
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
