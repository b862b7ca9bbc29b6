/**
 * The job feature's contract: every fact that crosses its processes (denit, the job service, a
 * job's keeper, launch/keep.c, and the client), defined here once for the TypeScript side;
 * tests/protocol_test.ts holds the C side to it. The seams:
 *
 * - the keeper's command line, `denit job keep DIR SEQ CAP [--cwd D] [--oom-count F] [--nofile
 *   N] [--env N=V]... -- ARGV` (keeperArgv);
 * - its handshake on stdout: `pid P` once the job runs (KEEPER_STARTED);
 * - the state line `DIR/SEQ.state` (STATE_FIELDS), written by the keeper only, read by
 *   parseState only; its keeper's pid and start time say whether it lives (keeperLives);
 * - a Cancel: the grace in ms in `DIR/SEQ.cancel`, then CANCEL_SIGNAL to the keeper;
 * - the run's directory in the spool (runDirectory), its stop marker (STOPPING_FILE, made by
 *   denit) and its counts (COUNTS_FILE, written by the service);
 * - the places on disk, trusted only if no other user can change them (prepareTrustedDirectory);
 * - the listening socket and the launch record, which denit's launcher hands the service
 *   (src/sys/listener.ts, src/sys/launch.ts).
 *
 * PID 1's side of the feature is host.ts; this file and host.ts are all of it that denit.js
 * carries (tests/imports_test.ts).
 */

import { dirname } from "../common/paths.ts";
import { describeProcess, readProcStat } from "../common/proc.ts";
import { errorLine } from "../common/errors.ts";

/**
 * The state line `N.state`, the keeper's part, in its order: `pid=P keeper=K ...`, all numbers.
 * `keeper` and `since`: its own pid (Cancel asks it) and start time (proc(5) stat field 22);
 * `exit`: -1 while the job runs or when a signal (`signal`, else 0) ended it; `lost`: output
 * bytes a full disk refused; `ended`: every writer of its pipes is gone; `oom` 1: a SIGKILL
 * while the memory cgroup counted an OOM kill.
 */
export const STATE_FIELDS = [
  "pid",
  "keeper",
  "since",
  "exit",
  "signal",
  "finished",
  "truncated",
  "lost",
  "ended",
  "oom",
] as const;

/** What `N.state` holds. */
export type KeeperState = { readonly [Field in typeof STATE_FIELDS[number]]: number };

/** Parses a state line; null for anything else (a file being replaced, say). */
export function parseState(text: string): KeeperState | null {
  const fields = new Map(text.trim().split(" ").map((pair) => pair.split("=") as [string, string]));
  const state: Record<string, number> = {};
  for (const key of STATE_FIELDS) {
    const value = Number(fields.get(key) ?? NaN);
    if (!Number.isInteger(value)) return null;
    state[key] = value;
  }
  return state as unknown as KeeperState;
}

/** What the keeper says on stdout once the job runs; anything else: it could not start it. */
export const KEEPER_STARTED = /^pid \d+\n$/;

/** The signal that tells a keeper a Cancel waits in `DIR/SEQ.cancel`. */
export const CANCEL_SIGNAL = "SIGUSR1";
/** Cancel's time between TERM and KILL when the request names none. */
export const DEFAULT_CANCEL_GRACE_MS = 10_000;

/** What the keeper of job `seq` of the run in `dir` needs beside the job's own argv. */
export interface KeeperOptions {
  readonly dir: string;
  readonly seq: number;
  readonly cap: number;
  readonly workDir: string | null;
  readonly oomCount: string | null;
  /** The job's open-file soft limit: the container's (the runtime raised the service's). */
  readonly fileLimit: number | null;
  readonly env: readonly string[];
}

/** The keeper's command line, the launcher's path first. */
export function keeperArgv(launcher: string, o: KeeperOptions, argv: readonly string[]): string[] {
  const head = [launcher, "job", "keep", o.dir, `${o.seq}`, `${o.cap}`];
  if (o.workDir !== null) head.push("--cwd", o.workDir);
  if (o.oomCount !== null) head.push("--oom-count", o.oomCount);
  if (o.fileLimit !== null) head.push("--nofile", `${o.fileLimit}`);
  return [...head, ...o.env.flatMap((entry) => ["--env", entry]), "--", ...argv];
}

/** Whether the keeper a state names still runs: its pid, not a zombie, with its start time. */
export function keeperLives(state: KeeperState): boolean {
  if (state.keeper <= 0) return false;
  const keeper = describeProcess(state.keeper);
  return keeper.startTime === String(state.since) && !"ZX?".includes(keeper.state);
}

/** Where `denit job` and `denit bridge` look for the service unless told (the README's path). */
export const DEFAULT_JOBS_SOCKET = "/run/denit/jobs.sock";

/** One run's directory in the spool, named by denit's pid and start time. */
export function runDirectory(spool: string, pid: number): string {
  return `${spool}/denit-${pid}-${readProcStat(pid).field(22) || "0"}`;
}

/** The run directory's file of job counts (JSON, common/snapshot.ts's JobCounts), written by the service. */
export const COUNTS_FILE = "counts.json";
/** Made when denit starts to stop: every Run reads it, and refuses a new job once it is there. */
export const STOPPING_FILE = "stopping";

/* Trusted places, as ssh judges them: root's or denit's user's, writable by no one else. */

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

/** Walks `dir` a component at a time, checking each link met: its real path, what is missing. */
function walk(dir: string, uid: number): { at: string; missing: string[] } {
  if (!dir.startsWith("/")) throw new Error(`"${dir}" is not an absolute path`);
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

/** Makes `dir` ready: created 0700 where missing, refused where another user could change it. */
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
  if (!info.isSocket) throw new Deno.errors.AlreadyExists(`"${socket}" exists and is not a socket`);
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
