/** One regular file, by descriptors: source never through a symlink, destination O_EXCL. */

import {
  closeFd,
  copyData,
  createExclusive,
  Errno,
  errnoMessage,
  linkOpenFile,
  openForReading,
  type PathStat,
  readAt,
  readXattrs,
  removeEntry,
  renameEntry,
  setFdMode,
  setFdOwner,
  setFdTimes,
  statFd,
  syncFd,
  writeXattr,
  type XattrFile,
} from "../sys/files.ts";
import { printable } from "../common/log.ts";

/** A copy failure; the message is one line naming the path and the cause. */
export class CopyError extends Error {
  override name = "CopyError";
}

/** Throws the one-line CopyError for a failed call. */
export function fail(action: string, path: string, errno: number): never {
  throw new CopyError(`Cannot ${action} "${path}": ${errnoMessage(errno)}`);
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

/** One file to copy, by descriptors of its directories and raw names. */
export interface FileJob {
  readonly srcDir: number;
  readonly name: Uint8Array;
  readonly destDir: number;
  /** The name it is written under (its own, or a temporary one the caller renames). */
  readonly target: Uint8Array;
  readonly srcPath: string;
  readonly destPath: string;
}

export interface XattrMiss {
  readonly attr: string;
  readonly path: string;
  readonly errno: number;
}

export interface FileResult {
  readonly bytes: number;
  readonly misses: readonly XattrMiss[];
  /** Made a hard link to the copy of another name of the same file. */
  readonly linked: boolean;
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

/** A stop signal, once one came. */
export class StopFlag {
  #signo = 0;

  /** Records a stop (the first one wins). */
  stop(signo: number): void {
    if (this.#signo === 0) this.#signo = signo;
  }

  check(): void {
    if (this.#signo > 0) throw new CopyInterrupted(this.#signo);
  }
}

const SMALL_CHUNK = 8 << 20; // copied on this thread in one call
const THREAD_CHUNK = 64 << 20; // larger files go in chunks on a worker thread

async function sha256(fd: number, size: number): Promise<string> {
  // node:crypto on first use only: only --verify pays for Deno's Node layer.
  const { createHash } = await import("node:crypto");
  const hash = createHash("sha256");
  const buffer = new Uint8Array(1 << 20);
  for (let at = 0; at < size;) {
    const n = readAt(fd, buffer, at);
    if (!n.ok || n.value === 0) break;
    hash.update(buffer.subarray(0, n.value));
    at += n.value;
  }
  return hash.digest("hex");
}

/** Copies every extended attribute; returns what could not be read or written. */
export function copyXattrs(from: XattrFile, to: XattrFile, path: () => string): XattrMiss[] {
  return writeXattrs(readXattrs(from), to, path);
}

/** Writes attributes `readXattrs` read (see copyXattrs). */
export function writeXattrs(
  attrs: ReturnType<typeof readXattrs>,
  to: XattrFile,
  path: () => string,
): XattrMiss[] {
  // ENOTSUP: the source's filesystem has none to copy.
  if (!attrs.ok) {
    return attrs.errno === Errno.ENOTSUP ? [] : [{ attr: "*", path: path(), errno: attrs.errno }];
  }
  const misses: XattrMiss[] = [];
  for (const [attr, value] of attrs.value) {
    const written = writeXattr(to, attr, value);
    if (!written.ok) misses.push({ attr: printable(attr), path: path(), errno: written.errno });
  }
  return misses;
}

/** Renames `temp` to `name`; a failure removes `temp` and throws, naming `path()`. */
export function putInPlace(
  dirFd: number,
  temp: Uint8Array | null,
  name: Uint8Array,
  path: () => string,
  action = "replace",
): void {
  if (temp === null) return;
  const renamed = renameEntry(dirFd, temp, dirFd, name);
  if (renamed.ok) return;
  removeEntry(dirFd, temp, false);
  fail(action, path(), renamed.errno);
}

const NO_MISSES: readonly XattrMiss[] = Object.freeze([]);

/** What follows a copy's data: owner, mode, attributes, flush and times, in the order that keeps each. */
function finishFile(
  input: number,
  output: number,
  src: PathStat,
  options: CopyOptions,
  destPath: () => string,
): XattrMiss[] {
  // chown first: it clears setuid/setgid bits and file capabilities, set again below.
  if (options.owner !== null) {
    const owned = setFdOwner(output, options.owner.uid, options.owner.gid);
    if (!owned.ok) fail("change the owner of", destPath(), owned.errno);
  }
  const mode = setFdMode(output, options.fileMode ?? src.mode);
  if (!mode.ok) fail("set the mode of", destPath(), mode.errno);
  const misses = copyXattrs(input, output, destPath);
  if (options.sync) {
    const synced = syncFd(output);
    if (!synced.ok) fail("flush", destPath(), synced.errno);
  }
  const times = setFdTimes(output, src.atime, src.mtime);
  if (!times.ok) fail("set the times of", destPath(), times.errno);
  return misses;
}

/**
 * Copies one file to `job.target` (data with holes, owner, mode, xattrs after chown, times), or
 * links it to a copy of another of its names; throws leaving nothing behind.
 */
export async function copyFile(
  job: FileJob,
  options: CopyOptions,
  stop: StopFlag,
  linked: Map<string, number>,
): Promise<FileResult> {
  const input = openForReading(job.srcDir, job.name);
  if (!input.ok) fail("read", job.srcPath, input.errno);
  let output = -1;
  let kept = false;
  try {
    const stat = statFd(input.value);
    if (!stat.ok) fail("inspect", job.srcPath, stat.errno);
    const src = stat.value;
    if (src.kind !== "file") {
      throw new CopyError(`Cannot copy "${job.srcPath}": it became a ${src.kind} while copying`);
    }
    const key = `${src.dev}:${src.ino}`;
    const first = src.nlink > 1 ? linked.get(key) : undefined;
    if (first !== undefined) {
      const made = linkOpenFile(first, job.destDir, job.target);
      if (!made.ok) fail("link", job.destPath, made.errno);
      return { bytes: 0, misses: NO_MISSES, linked: true };
    }
    const created = createExclusive(job.destDir, job.target, 0o600);
    if (!created.ok) fail("write", job.destPath, created.errno);
    output = created.value;
    const sparse = src.blocks * 512 < src.size;
    const data = await copyData(input.value, output, src.size, sparse, {
      smallChunk: SMALL_CHUNK,
      threadChunk: THREAD_CHUNK,
      check: () => stop.check(),
    });
    if (!data.ok) fail("write", job.destPath, data.errno);
    const misses = finishFile(input.value, output, src, options, () => job.destPath);
    stop.check();
    if (options.verify && await sha256(input.value, src.size) !== await sha256(output, src.size)) {
      throw new CopyError(
        `Verification failed for "${job.destPath}": contents differ from "${job.srcPath}"`,
      );
    }
    stop.check();
    kept = src.nlink > 1 && linked.size < MAX_KEPT;
    if (kept) linked.set(key, output);
    return { bytes: data.value, misses, linked: false };
  } catch (err: unknown) {
    // A failure or a stop: remove what was created under the target.
    if (output >= 0) removeEntry(job.destDir, job.target, false);
    throw err;
  } finally {
    closeFd(input.value);
    if (output >= 0 && !kept) closeFd(output);
  }
}
