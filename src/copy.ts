/**
 * Copy mode, second half: carry out a plan. Each file is written to a temporary name in its
 * target directory (created with O_EXCL, so never through a symlink), given its mode, owner and
 * times, then renamed into place: a reader sees the old file or the new one, never a part.
 * A failure or SIGTERM/SIGINT removes the temporary file in flight; nothing else is left.
 */

import { basename, dirname, join } from "./paths.ts";
import { CopyError, describeError, type Item, type Owner } from "./copy_plan.ts";
import {
  closeFd,
  copyRange,
  copyRangeOnThread,
  createExclusive,
  errnoMessage,
  openDirectory,
  openForReading,
  renamePath,
  sendFile,
  setFdMode,
  setFdOwner,
  setFdTimes,
  setPathMode,
  setPathOwner,
  setPathTimes,
  syncFd,
} from "./libc.ts";
import { sha256File } from "./hash.ts";

/** Options of the copy itself. */
export interface CopyOptions {
  readonly owner: Owner | null;
  readonly fileMode: number | null;
  readonly verify: boolean;
  readonly sync: boolean;
}

/** What a copy did. */
export interface CopySummary {
  files: number;
  dirs: number;
  links: number;
  bytes: number;
  unchanged: number;
  skipped: number;
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
const YIELD_EVERY_MS = 50; // longest stretch without a turn of the event loop (signals run there)
// copy_file_range(2) refuses some pairs of files; sendfile(2) handles any regular files.
const FALLBACK_ERRNOS = new Set([18, 22, 38, 95]); // EXDEV, EINVAL, ENOSYS, EOPNOTSUPP

function fail(action: string, path: string, errno: number): never {
  throw new CopyError(`Cannot ${action} "${path}": ${errnoMessage(errno)}`);
}

/** A new directory being built under a temporary name (`path`) until complete. */
interface Stage {
  readonly dest: string;
  readonly path: string;
  readonly dirs: Array<Extract<Item, { kind: "dir" }>>;
}

function staged(stage: Stage, dest: string): string {
  return stage.path + dest.slice(stage.dest.length);
}

function tempNameFor(dest: string): string {
  const random = crypto.getRandomValues(new Uint8Array(6));
  const suffix = [...random].map((b) => b.toString(16).padStart(2, "0")).join("");
  return join(dirname(dest), `.${basename(dest)}.denit-${suffix}`);
}

/** Runs a plan; one instance per run. */
export class CopyRun {
  readonly #options: CopyOptions;
  readonly #temps = new Set<string>();
  readonly #touchedDirs = new Set<string>();
  readonly summary: CopySummary = {
    files: 0,
    dirs: 0,
    links: 0,
    bytes: 0,
    unchanged: 0,
    skipped: 0,
  };
  #interrupted: number | null = null;
  #lastYield = performance.now();

  constructor(options: CopyOptions) {
    this.#options = options;
  }

  /** Records a stop signal and removes the temporary files in flight at once. */
  interrupt(signo: number): void {
    this.#interrupted ??= signo;
    for (const temp of this.#temps) this.#removeTemp(temp);
  }

  /**
   * Carries out the plan; throws CopyError or CopyInterrupted.
   *
   * A directory that does not exist yet is built whole under a temporary name beside it and
   * renamed into place once complete: its files need no rename of their own, and a reader
   * sees the directory complete or not at all. Into existing directories, each file goes
   * through its own temporary name.
   */
  async run(items: readonly Item[], destRoot: string, onItem: (item: Item) => void): Promise<void> {
    this.#mkdir(destRoot, 0o755, true);
    let stage: Stage | null = null;
    const existingDirs: Array<Extract<Item, { kind: "dir" }>> = [];
    for (const item of items) {
      this.#checkInterrupted();
      if (stage !== null && item.kind !== "special" && !item.dest.startsWith(`${stage.dest}/`)) {
        this.#finishStage(stage);
        stage = null;
      }
      onItem(item);
      if (item.kind === "special") {
        this.summary.skipped++;
      } else if (item.fate === "unchanged") {
        if (item.kind !== "dir") this.summary.unchanged++;
      } else if (item.kind === "dir") {
        this.summary.dirs++;
        if (item.fate !== "new") {
          existingDirs.push(item);
        } else if (stage === null) {
          stage = { dest: item.dest, path: tempNameFor(item.dest), dirs: [item] };
          this.#temps.add(stage.path);
          this.#mkdir(stage.path, 0o700, false);
        } else {
          stage.dirs.push(item);
          this.#mkdir(staged(stage, item.dest), 0o700, false);
        }
      } else if (item.kind === "file") {
        await this.#copyFile(item, stage);
      } else {
        this.#copyLink(item, stage);
      }
      await this.#maybeYield();
    }
    if (stage !== null) this.#finishStage(stage);
    // Existing directories last, deepest first: adding entries changed their times again.
    for (const item of existingDirs.reverse()) this.#finishDir(item.dest, item);
    if (this.#options.sync) this.#syncDirs();
  }

  #finishStage(stage: Stage): void {
    for (const dir of [...stage.dirs].reverse()) this.#finishDir(staged(stage, dir.dest), dir);
    if (this.#options.sync) {
      for (const dir of stage.dirs) this.#touchedDirs.add(staged(stage, dir.dest));
      this.#syncDirs();
      this.#touchedDirs.clear();
    }
    const renamed = renamePath(stage.path, stage.dest);
    if (!renamed.ok) fail("create", stage.dest, renamed.errno);
    this.#temps.delete(stage.path);
    this.#touchedDirs.add(dirname(stage.dest));
  }

  #checkInterrupted(): void {
    if (this.#interrupted !== null) throw new CopyInterrupted(this.#interrupted);
  }

  async #maybeYield(): Promise<void> {
    if (performance.now() - this.#lastYield < YIELD_EVERY_MS) return;
    // A macrotask turn: signal listeners only run here.
    await new Promise((resolve) => setTimeout(resolve, 0));
    this.#lastYield = performance.now();
  }

  #mkdir(path: string, mode: number, recursive: boolean): void {
    try {
      Deno.mkdirSync(path, { recursive, mode });
    } catch (err: unknown) {
      throw new CopyError(`Cannot create directory "${path}": ${describeError(err)}`);
    }
    this.#touchedDirs.add(dirname(path));
  }

  #finishDir(path: string, item: Extract<Item, { kind: "dir" }>): void {
    const { owner } = this.#options;
    if (owner !== null) {
      const result = setPathOwner(path, owner.uid, owner.gid);
      if (!result.ok) fail("change the owner of", item.dest, result.errno);
    }
    const mode = setPathMode(path, item.stat.mode);
    if (!mode.ok) fail("set the mode of", item.dest, mode.errno);
    const times = setPathTimes(path, item.stat.atime, item.stat.mtime);
    if (!times.ok) fail("set the times of", item.dest, times.errno);
  }

  async #copyFile(item: Extract<Item, { kind: "file" }>, stage: Stage | null): Promise<void> {
    // Inside a staged directory the final name is invisible until the stage is renamed.
    const temp = stage === null ? tempNameFor(item.dest) : staged(stage, item.dest);
    const input = openForReading(item.src);
    if (!input.ok) fail("read", item.src, input.errno);
    const output = createExclusive(temp, 0o600);
    if (!output.ok) {
      closeFd(input.value);
      fail("write", item.dest, output.errno);
    }
    this.#temps.add(temp);
    let done = false;
    try {
      const bytes = await this.#copyData(input.value, output.value, item);
      this.#setMetadata(output.value, item);
      closeFd(output.value);
      done = true;
      this.#checkInterrupted();
      if (this.#options.verify && await sha256File(item.src) !== await sha256File(temp)) {
        throw new CopyError(
          `Verification failed for "${item.dest}": contents differ from "${item.src}"`,
        );
      }
      if (stage === null) {
        const renamed = renamePath(temp, item.dest);
        if (!renamed.ok) fail("replace", item.dest, renamed.errno);
        this.#touchedDirs.add(dirname(item.dest));
      }
      this.#temps.delete(temp);
      this.summary.files++;
      this.summary.bytes += bytes;
    } finally {
      closeFd(input.value);
      if (!done) closeFd(output.value);
      if (this.#temps.delete(temp)) this.#removeTemp(temp);
    }
  }

  async #copyData(input: number, output: number, item: Extract<Item, { kind: "file" }>) {
    let copied = 0;
    let useSendfile = false;
    const large = item.stat.size > SMALL_CHUNK;
    if (!large) {
      // One call for a small file: a count short of what was asked means end of file
      // (regular files; far below copy_file_range's 2 GiB cap per call).
      const wanted = item.stat.size + 1;
      const once = copyRange(input, output, wanted);
      if (once.ok && once.value < wanted) return once.value;
      if (once.ok) copied = once.value;
      else if (FALLBACK_ERRNOS.has(once.errno)) useSendfile = true;
      else fail("write", item.dest, once.errno);
    }
    for (;;) {
      this.#checkInterrupted();
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
      if (!result.ok) fail("write", item.dest, result.errno);
      if (result.value === 0) return copied;
      copied += result.value;
    }
  }

  #setMetadata(fd: number, item: Extract<Item, { kind: "file" }>): void {
    const { owner, fileMode } = this.#options;
    // chown first: it clears setuid and setgid bits, which the chmod after it restores.
    if (owner !== null) {
      const result = setFdOwner(fd, owner.uid, owner.gid);
      if (!result.ok) fail("change the owner of", item.dest, result.errno);
    }
    const mode = setFdMode(fd, fileMode ?? item.stat.mode);
    if (!mode.ok) fail("set the mode of", item.dest, mode.errno);
    if (this.#options.sync) {
      const synced = syncFd(fd);
      if (!synced.ok) fail("flush", item.dest, synced.errno);
    }
    const times = setFdTimes(fd, item.stat.atime, item.stat.mtime);
    if (!times.ok) fail("set the times of", item.dest, times.errno);
  }

  #copyLink(item: Extract<Item, { kind: "link" }>, stage: Stage | null): void {
    const temp = stage === null ? tempNameFor(item.dest) : staged(stage, item.dest);
    try {
      Deno.symlinkSync(item.target, temp);
    } catch (err: unknown) {
      throw new CopyError(`Cannot create the link "${item.dest}": ${describeError(err)}`);
    }
    this.#temps.add(temp);
    try {
      const { owner } = this.#options;
      if (owner !== null) {
        const result = setPathOwner(temp, owner.uid, owner.gid);
        if (!result.ok) fail("change the owner of", item.dest, result.errno);
      }
      const times = setPathTimes(temp, item.stat.atime, item.stat.mtime);
      if (!times.ok) fail("set the times of", item.dest, times.errno);
      if (stage === null) {
        const renamed = renamePath(temp, item.dest);
        if (!renamed.ok) fail("replace", item.dest, renamed.errno);
        this.#touchedDirs.add(dirname(item.dest));
      }
      this.#temps.delete(temp);
      this.summary.links++;
    } finally {
      if (this.#temps.delete(temp)) this.#removeTemp(temp);
    }
  }

  #removeTemp(temp: string): void {
    try {
      // Recursive for a staged directory; Deno's removal never follows symlinks inside it.
      Deno.removeSync(temp, { recursive: true });
    } catch {
      // Already gone (removed by interrupt() or never created): nothing is left behind.
    }
  }

  #syncDirs(): void {
    for (const dir of this.#touchedDirs) {
      const fd = openDirectory(dir);
      if (!fd.ok) fail("open", dir, fd.errno);
      const synced = syncFd(fd.value);
      closeFd(fd.value);
      // Some filesystems cannot fsync a directory (EINVAL); their renames are as durable as it gets.
      if (!synced.ok && synced.errno !== 22) fail("flush", dir, synced.errno);
    }
  }
}
