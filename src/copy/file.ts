/**
 * Copying one regular file (large ones in chunks on a thread of the runtime's pool). Everything
 * goes through descriptors: the
 * source opened without following a symlink, the destination created with O_EXCL under its
 * temporary name (or its final name inside a directory that is still being built).
 */

import {
  closeFd,
  copyData,
  createExclusive,
  Errno,
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
import { CopyError, fail, type Owner } from "./check.ts";
import { display, printable } from "./names.ts";

/** Options of the copy itself. */
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
  readonly destName: Uint8Array;
  /** Written under this name and renamed to destName; null: written as destName directly. */
  readonly temp: Uint8Array | null;
  /** The directories' paths, for messages (a file's own path is only built for one). */
  readonly srcBase: string;
  readonly destBase: string;
  /** Keep the written file open and return its descriptor (for hard links to it). */
  readonly keep: boolean;
  /**
   * A file with more than one link is not copied but handed back (`deferred`): the main thread
   * copies hard links one at a time, so that their other names become links again.
   */
  readonly deferLinked: boolean;
}

/** An attribute that could not be copied. */
export interface XattrMiss {
  readonly attr: string;
  readonly path: string;
  readonly errno: number;
}

/** What copying one file did. */
export interface FileResult {
  readonly bytes: number;
  readonly keptFd: number | null;
  readonly misses: readonly XattrMiss[];
  /** Not copied: a hard-linked file for the main thread (see FileJob.deferLinked). */
  readonly deferred: boolean;
}

/** Thrown when a stop signal arrived; the temporary file in flight is already gone. */
export class CopyInterrupted extends Error {
  override name = "CopyInterrupted";
  constructor(readonly signo: number) {
    super(`interrupted by signal ${signo}`);
  }
}

/** A stop request: 0 go on, N > 0 signal N, -1 a failure elsewhere. */
export class StopFlag {
  #code = 0;

  /** Records a stop (the first one wins). */
  stop(code: number): void {
    if (this.#code === 0) this.#code = code;
  }

  /** Throws CopyInterrupted (or a CopyError for a failure elsewhere) once a stop is recorded. */
  check(): void {
    const code = this.#code;
    if (code > 0) throw new CopyInterrupted(code);
    if (code < 0) throw new CopyError("stopped: another part of the copy failed");
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

/**
 * Copies every extended attribute; what could not be read or written is returned, with the
 * destination's path (built only then: a file's path is not built on the way of every copy).
 */
export function copyXattrs(from: XattrFile, to: XattrFile, path: () => string): XattrMiss[] {
  const attrs = readXattrs(from);
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

/**
 * Renames what was written under `temp` to `name` (nothing to do without a temporary name); a
 * failure removes the temporary file or link and throws, naming `path()`.
 */
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
 * Copies one file: data (holes kept), owner, mode, extended attributes (file capabilities
 * included, after chown, which would clear them), times; then renames the temporary into place.
 * Throws CopyError or CopyInterrupted with nothing left behind.
 */
export async function copyFile(
  job: FileJob,
  options: CopyOptions,
  stop: StopFlag,
  onThread: boolean,
): Promise<FileResult> {
  const srcPath = () => display(job.srcBase, job.name);
  const destPath = () => display(job.destBase, job.destName);
  const input = openForReading(job.srcDir, job.name);
  if (!input.ok) fail("read", srcPath(), input.errno);
  const target = job.temp ?? job.destName;
  let output = -1;
  let done = false;
  try {
    const stat = statFd(input.value);
    if (!stat.ok) fail("inspect", srcPath(), stat.errno);
    const src = stat.value;
    if (src.kind !== "file") {
      throw new CopyError(`Cannot copy "${srcPath()}": it became a ${src.kind} while copying`);
    }
    if (job.deferLinked && src.nlink > 1) {
      return { bytes: 0, keptFd: null, misses: NO_MISSES, deferred: true };
    }
    const created = createExclusive(job.destDir, target, 0o600);
    if (!created.ok) fail("write", destPath(), created.errno);
    output = created.value;
    const sparse = src.blocks * 512 < src.size;
    const data = await copyData(input.value, output, src.size, sparse, {
      smallChunk: SMALL_CHUNK,
      threadChunk: THREAD_CHUNK,
      onThread,
      check: () => stop.check(),
    });
    if (!data.ok) fail("write", destPath(), data.errno);
    const misses = finishFile(input.value, output, src, options, destPath);
    stop.check();
    if (options.verify && await sha256(input.value, src.size) !== await sha256(output, src.size)) {
      throw new CopyError(
        `Verification failed for "${destPath()}": contents differ from "${srcPath()}"`,
      );
    }
    stop.check();
    putInPlace(job.destDir, job.temp, job.destName, destPath);
    done = true;
    return { bytes: data.value, keptFd: job.keep ? output : null, misses, deferred: false };
  } finally {
    closeFd(input.value);
    if (output >= 0 && !(done && job.keep)) closeFd(output);
    // Only a failure or a stop leaves a file behind: remove what was created under `target`.
    if (!done && output >= 0) removeEntry(job.destDir, target, false);
  }
}
