/**
 * Copying one regular file, the part of copy mode that runs on several threads: the main
 * thread and, for large trees, a worker (copy_worker.ts). Each thread has its own FileCopier.
 */

import type { Owner } from "./plan.ts";
import { CopyError } from "./plan.ts";
import {
  closeFd,
  copyRange,
  copyRangeOnThread,
  createExclusive,
  errnoMessage,
  openForReading,
  type PathStat,
  renamePath,
  sendFile,
  setFdMode,
  setFdOwner,
  setFdTimes,
  statFd,
  syncFd,
} from "../sys/files.ts";
import { sha256File } from "./hash.ts";

/** Options of the copy itself. */
export interface CopyOptions {
  readonly owner: Owner | null;
  readonly fileMode: number | null;
  readonly verify: boolean;
  readonly sync: boolean;
}

/** One file to copy: written at `target`, renamed to `dest` when `target` is a temporary. */
export interface FileJob {
  readonly src: string;
  readonly dest: string;
  readonly target: string;
  readonly renameToDest: boolean;
  /** null: read from the open file (a new file in a new directory). */
  readonly stat: PathStat | null;
}

/** Thrown when a stop signal arrived; the temporary file in flight is already gone. */
export class CopyInterrupted extends Error {
  override name = "CopyInterrupted";
  constructor(readonly signo: number) {
    super(`interrupted by signal ${signo}`);
  }
}

const SMALL_CHUNK = 8 << 20; // copied on this thread in one call
const THREAD_CHUNK = 64 << 20; // larger files go in chunks on a worker thread
const YIELD_EVERY_MS = 50; // longest stretch without a turn of the event loop
// copy_file_range(2) refuses some pairs of files; sendfile(2) handles any regular files.
const FALLBACK_ERRNOS = new Set([18, 22, 38, 95]); // EXDEV, EINVAL, ENOSYS, EOPNOTSUPP

/** Throws the one-line CopyError for a failed call. */
export function fail(action: string, path: string, errno: number): never {
  throw new CopyError(`Cannot ${action} "${path}": ${errnoMessage(errno)}`);
}

/** Copies files on one thread, keeping track of its temporary file in flight. */
export class FileCopier {
  readonly #options: CopyOptions;
  /** Temporary paths written now: removed on failure or interruption. */
  readonly temps = new Set<string>();
  #interrupted: number | null = null;
  #lastYield = performance.now();
  files = 0;
  bytes = 0;

  constructor(options: CopyOptions) {
    this.#options = options;
  }

  /** Records a stop signal; the copy stops at the next check and cleans up. */
  interrupt(signo: number): void {
    this.#interrupted ??= signo;
  }

  /** Throws CopyInterrupted once a stop was recorded. */
  checkInterrupted(): void {
    if (this.#interrupted !== null) throw new CopyInterrupted(this.#interrupted);
  }

  /** Turns the event loop now and then: signal listeners and worker messages run only there. */
  async maybeYield(): Promise<void> {
    if (performance.now() - this.#lastYield < YIELD_EVERY_MS) return;
    await new Promise((resolve) => setTimeout(resolve, 0));
    this.#lastYield = performance.now();
  }

  /** Removes a temporary path (recursively for a staged directory), if it is still there. */
  removeTemp(temp: string): void {
    try {
      // Deno's recursive removal never follows symlinks inside the tree.
      Deno.removeSync(temp, { recursive: true });
    } catch {
      // Already gone (or never created): nothing is left behind.
    }
  }

  /** Copies one file; throws CopyError or CopyInterrupted with nothing left behind. */
  async copy(planned: FileJob): Promise<void> {
    const input = openForReading(planned.src);
    if (!input.ok) fail("read", planned.src, input.errno);
    let stat = planned.stat;
    if (stat === null) {
      const read = statFd(input.value);
      if (!read.ok) {
        closeFd(input.value);
        fail("inspect", planned.src, read.errno);
      }
      stat = read.value;
    }
    const job = { ...planned, stat };
    if (job.stat.kind !== "file") {
      closeFd(input.value);
      throw new CopyError(`Cannot copy "${job.src}": it became a ${job.stat.kind} while copying`);
    }
    const output = createExclusive(job.target, 0o600);
    if (!output.ok) {
      closeFd(input.value);
      fail("write", job.dest, output.errno);
    }
    this.temps.add(job.target);
    let outputOpen = true;
    try {
      const bytes = await this.#copyData(input.value, output.value, job);
      this.#setMetadata(output.value, job);
      closeFd(output.value);
      outputOpen = false;
      this.checkInterrupted();
      if (this.#options.verify && await sha256File(job.src) !== await sha256File(job.target)) {
        throw new CopyError(
          `Verification failed for "${job.dest}": contents differ from "${job.src}"`,
        );
      }
      this.checkInterrupted();
      if (job.renameToDest) {
        const renamed = renamePath(job.target, job.dest);
        if (!renamed.ok) fail("replace", job.dest, renamed.errno);
      }
      this.temps.delete(job.target);
      this.files++;
      this.bytes += bytes;
    } finally {
      closeFd(input.value);
      if (outputOpen) closeFd(output.value);
      if (this.temps.delete(job.target)) this.removeTemp(job.target);
    }
  }

  async #copyData(
    input: number,
    output: number,
    job: FileJob & { stat: PathStat },
  ): Promise<number> {
    let copied = 0;
    let useSendfile = false;
    const large = job.stat.size > SMALL_CHUNK;
    if (!large) {
      // One call for a small file: a count short of what was asked means end of file
      // (regular files; far below copy_file_range's 2 GiB cap per call).
      const wanted = job.stat.size + 1;
      const once = copyRange(input, output, wanted);
      if (once.ok && once.value < wanted) return once.value;
      if (once.ok) copied = once.value;
      else if (FALLBACK_ERRNOS.has(once.errno)) useSendfile = true;
      else fail("write", job.dest, once.errno);
    }
    for (;;) {
      this.checkInterrupted();
      let result = useSendfile
        ? sendFile(output, input, SMALL_CHUNK)
        : large
        ? await copyRangeOnThread(input, output, THREAD_CHUNK)
        : copyRange(input, output, SMALL_CHUNK);
      // The worker thread cannot report errno: repeat the call here to learn it.
      if (!result.ok && result.errno === 0) result = copyRange(input, output, SMALL_CHUNK);
      if (!result.ok && !useSendfile && copied === 0 && FALLBACK_ERRNOS.has(result.errno)) {
        useSendfile = true;
        continue;
      }
      if (!result.ok) fail("write", job.dest, result.errno);
      if (result.value === 0) return copied;
      copied += result.value;
    }
  }

  #setMetadata(fd: number, job: FileJob & { stat: PathStat }): void {
    const { owner, fileMode } = this.#options;
    // chown first: it clears setuid and setgid bits, which the chmod after it restores.
    if (owner !== null) {
      const result = setFdOwner(fd, owner.uid, owner.gid);
      if (!result.ok) fail("change the owner of", job.dest, result.errno);
    }
    const mode = setFdMode(fd, fileMode ?? job.stat.mode);
    if (!mode.ok) fail("set the mode of", job.dest, mode.errno);
    if (this.#options.sync) {
      const synced = syncFd(fd);
      if (!synced.ok) fail("flush", job.dest, synced.errno);
    }
    const times = setFdTimes(fd, job.stat.atime, job.stat.mtime);
    if (!times.ok) fail("set the times of", job.dest, times.errno);
  }
}
