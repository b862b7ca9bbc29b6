/**
 * One entry's copy by descriptors: a file's data (source never through a symlink, destination
 * O_EXCL), and the attributes every entry gets.
 */

import * as fs from "../sys/files.ts";
import { printable } from "../common/log.ts";

/** A copy failure; the message is one line naming the path and the cause. */
export class CopyError extends Error {
  override name = "CopyError";
}

/** Throws the one-line CopyError for a failed call. */
export function fail(action: string, path: string, errno: number): never {
  throw new CopyError(`Cannot ${action} "${path}": ${fs.errnoMessage(errno)}`);
}

/** A call's value, else the CopyError naming `action` and `path`. */
export function must<T>(result: fs.Outcome<T>, action: string, path: string): T {
  if (!result.ok) fail(action, path, result.errno);
  return result.value;
}

/** A call that returns nothing: the CopyError naming `action` and `path` if it failed. */
export function ensure(result: fs.CallResult, action: string, path: string): void {
  if (!result.ok) fail(action, path, result.errno);
}

/** Ownership to give every copied entry (`--chown`). */
export interface Owner {
  readonly uid: number;
  readonly gid: number;
}

export interface CopyOptions {
  readonly owner: Owner | null;
  readonly fileMode: number | null;
  readonly verify: boolean;
  readonly sync: boolean;
}

export interface XattrMiss {
  readonly attr: string;
  readonly path: string;
  readonly errno: number;
}

/** Hard-linked files kept open to link later names to; beyond it, later names are copies. */
const MAX_KEPT = 512;

/** Thrown when a stop signal arrived; the temporary file in flight is already gone. */
export class CopyInterrupted extends Error {
  override name = "CopyInterrupted";
  constructor(readonly signo: number) {
    super(`interrupted by signal ${signo}`);
  }
}

/** A stop signal, once one came (the first one wins). */
export class StopFlag {
  #signo = 0;

  stop(signo: number): void {
    if (this.#signo === 0) this.#signo = signo;
  }

  check(): void {
    if (this.#signo > 0) throw new CopyInterrupted(this.#signo);
  }
}

async function sha256(fd: number, size: number): Promise<string> {
  // node:crypto on first use only: only --verify pays for Deno's Node layer.
  const { createHash } = await import("node:crypto");
  const hash = createHash("sha256");
  const buffer = new Uint8Array(1 << 20);
  for (let at = 0; at < size;) {
    const n = fs.readAt(fd, buffer, at);
    if (!n.ok || n.value === 0) break;
    hash.update(buffer.subarray(0, n.value));
    at += n.value;
  }
  return hash.digest("hex");
}

/**
 * After an entry's data: owner (first: chown clears setuid bits and capabilities), `mode` (null
 * for a link), the source's extended attributes, flush, times. Returns the attributes missed.
 */
export function finish(
  to: fs.Target,
  src: fs.PathStat,
  attrs: fs.Outcome<fs.Xattr[]>,
  mode: number | null,
  options: CopyOptions,
  path: string,
): XattrMiss[] {
  const { owner, sync } = options;
  if (owner !== null) ensure(fs.setOwner(to, owner.uid, owner.gid), "change the owner of", path);
  if (mode !== null && typeof to === "number") {
    ensure(fs.setMode(to, mode), "set the mode of", path);
  }
  const misses: XattrMiss[] = [];
  // ENOTSUP: the source's filesystem has none to copy.
  if (!attrs.ok && attrs.errno !== fs.Errno.ENOTSUP) {
    misses.push({ attr: "*", path, errno: attrs.errno });
  }
  for (const [attr, value] of attrs.ok ? attrs.value : []) {
    const written = fs.writeXattr(to, attr, value);
    if (!written.ok) misses.push({ attr: printable(attr), path, errno: written.errno });
  }
  if (sync && typeof to === "number") {
    const synced = fs.syncFd(to);
    // Some filesystems cannot fsync a directory (EINVAL): their renames are as durable.
    const harmless = src.kind === "dir" && !synced.ok && synced.errno === fs.Errno.EINVAL;
    if (!harmless) ensure(synced, "flush", path);
  }
  ensure(fs.setTimes(to, src.atime, src.mtime), "set the times of", path);
  return misses;
}

/** Renames `temp` to `name`; a failure removes `temp` and throws, naming `path`. */
export function putInPlace(
  dirFd: number,
  temp: Uint8Array,
  name: Uint8Array,
  path: string,
  action = "replace",
): void {
  const renamed = fs.renameEntry(dirFd, temp, dirFd, name);
  if (renamed.ok) return;
  fs.removeEntry(dirFd, temp, false);
  fail(action, path, renamed.errno);
}

/** One file to copy, by descriptors of its directories; `target` is the name it is written under. */
export interface FileJob {
  readonly srcDir: number;
  readonly name: Uint8Array;
  readonly destDir: number;
  readonly target: Uint8Array;
  readonly srcPath: string;
  readonly destPath: string;
}

/**
 * Copies one file to `job.target` (data with holes, then `finish`), or links it to the copy of
 * another of its names (`linked`); throws leaving nothing behind.
 */
export async function copyFile(
  job: FileJob,
  options: CopyOptions,
  stop: StopFlag,
  linked: Map<string, number>,
): Promise<{ bytes: number; misses: XattrMiss[]; linked: boolean }> {
  const input = must(fs.openForReading(job.srcDir, job.name), "read", job.srcPath);
  let output = -1;
  let kept = false;
  try {
    const src = must(fs.statFd(input), "inspect", job.srcPath);
    if (src.kind !== "file") {
      throw new CopyError(`Cannot copy "${job.srcPath}": it became a ${src.kind} while copying`);
    }
    const key = `${src.dev}:${src.ino}`;
    const first = src.nlink > 1 ? linked.get(key) : undefined;
    if (first !== undefined) {
      ensure(fs.linkOpenFile(first, job.destDir, job.target), "link", job.destPath);
      return { bytes: 0, misses: [], linked: true };
    }
    output = must(fs.createExclusive(job.destDir, job.target, 0o600), "write", job.destPath);
    const sparse = src.blocks * 512 < src.size;
    const copied = await fs.copyData(input, output, src.size, sparse, () => stop.check());
    const bytes = must(copied, "write", job.destPath);
    const mode = options.fileMode ?? src.mode;
    const misses = finish(output, src, fs.readXattrs(input), mode, options, job.destPath);
    stop.check();
    if (options.verify && await sha256(input, src.size) !== await sha256(output, src.size)) {
      throw new CopyError(
        `Verification failed for "${job.destPath}": contents differ from "${job.srcPath}"`,
      );
    }
    stop.check();
    kept = src.nlink > 1 && linked.size < MAX_KEPT;
    if (kept) linked.set(key, output);
    return { bytes, misses, linked: false };
  } catch (err: unknown) {
    // A failure or a stop: remove what was created under the target.
    if (output >= 0) fs.removeEntry(job.destDir, job.target, false);
    throw err;
  } finally {
    fs.closeFd(input);
    if (output >= 0 && !kept) fs.closeFd(output);
  }
}
