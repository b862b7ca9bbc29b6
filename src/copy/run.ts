/**
 * Copy mode, second half: carry out a plan, in three phases.
 * 1. Directories and links, in plan order. A directory that does not exist yet is built whole
 *    under a temporary name beside it (a "stage") and renamed into place at the end, so a
 *    reader sees it complete or not at all, and its files need no rename of their own.
 * 2. Files (copy_file.ts): into a stage directly; into an existing directory through a
 *    temporary name (O_EXCL, never through a symlink) renamed into place. A large tree is
 *    shared with a worker thread (copy_worker.ts), which is what the second core is for.
 * 3. Directory modes and times (deepest first: adding entries changed them), stage renames,
 *    and with --sync an fsync of every directory written.
 * A failure or SIGTERM/SIGINT/SIGHUP removes what is in flight: temporary files and stages.
 */

import { CopyError, describeError, type Item } from "./plan.ts";
import { CopyInterrupted, type CopyOptions, fail, FileCopier, type FileJob } from "./file.ts";
import type { FromWorker } from "./worker.ts";
import {
  closeFd,
  openDirectory,
  renamePath,
  setPathMode,
  setPathOwner,
  setPathTimes,
  syncFd,
} from "../sys/files.ts";
import { basename, dirname, join } from "./paths.ts";
import { COPY_WORKER_NAME } from "./worker_name.ts";

export { CopyInterrupted, type CopyOptions };

/** What a copy did. */
export interface CopySummary {
  files: number;
  dirs: number;
  links: number;
  bytes: number;
  unchanged: number;
  skipped: number;
}

/** Below this many files, a worker thread costs more to start than it saves. */
const PARALLEL_MIN_FILES = 2000;

type DirItem = Extract<Item, { kind: "dir" }>;

/** A new directory being built under a temporary name (`path`) until complete. */
interface Stage {
  readonly dest: string;
  readonly path: string;
  readonly dirs: DirItem[];
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
  readonly #copier: FileCopier;
  readonly #stages: Stage[] = [];
  readonly #touchedDirs = new Set<string>();
  readonly summary: CopySummary = {
    files: 0,
    dirs: 0,
    links: 0,
    bytes: 0,
    unchanged: 0,
    skipped: 0,
  };
  #worker: Worker | null = null;

  constructor(options: CopyOptions) {
    this.#options = options;
    this.#copier = new FileCopier(options);
  }

  /** Records a stop signal: both threads stop at their next check and clean up. */
  interrupt(signo: number): void {
    this.#copier.interrupt(signo);
    this.#worker?.postMessage({ type: "stop", signo });
  }

  /** Carries out the plan; throws CopyError or CopyInterrupted, leaving nothing half-made. */
  async run(items: readonly Item[], onItem: (item: Item) => void): Promise<void> {
    // The roots' parent directories exist (copy_main.ts made them); a new DEST is a stage.
    try {
      const { jobs, existingDirs } = await this.#prepare(items, onItem);
      await this.#copyFiles(jobs);
      for (const stage of this.#stages) this.#finishStage(stage);
      this.#stages.length = 0;
      for (const item of existingDirs.reverse()) this.#finishDir(item.dest, item);
      if (this.#options.sync) this.#syncDirs();
    } finally {
      // Only what a failure or a signal left: stages not yet renamed into place.
      for (const stage of this.#stages) this.#copier.removeTemp(stage.path);
    }
  }

  async #prepare(items: readonly Item[], onItem: (item: Item) => void) {
    const jobs: FileJob[] = [];
    const existingDirs: DirItem[] = [];
    let stage: Stage | null = null;
    for (const item of items) {
      this.#copier.checkInterrupted();
      if (stage !== null && item.kind !== "special" && !item.dest.startsWith(`${stage.dest}/`)) {
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
          this.#stages.push(stage);
          this.#mkdir(stage.path, 0o700, false);
        } else {
          stage.dirs.push(item);
          // 0700 until phase 3 gives it the source's mode, after its contents are in.
          this.#mkdir(staged(stage, item.dest), 0o700, false);
        }
      } else if (item.kind === "file") {
        const target = stage === null ? tempNameFor(item.dest) : staged(stage, item.dest);
        jobs.push({
          src: item.src,
          dest: item.dest,
          target,
          renameToDest: stage === null,
          stat: item.stat,
        });
        if (stage === null) this.#touchedDirs.add(dirname(item.dest));
      } else {
        this.#copyLink(item, stage);
      }
      await this.#copier.maybeYield();
    }
    return { jobs, existingDirs };
  }

  async #copyFiles(jobs: FileJob[]): Promise<void> {
    const parallel = jobs.length >= PARALLEL_MIN_FILES && navigator.hardwareConcurrency > 1;
    const half = parallel ? Math.floor(jobs.length / 2) : jobs.length;
    const answer = parallel ? this.#startWorker(jobs.slice(half)) : null;
    let failure: unknown = null;
    try {
      for (const job of jobs.slice(0, half)) {
        this.#copier.checkInterrupted();
        await this.#copier.copy(job);
        await this.#copier.maybeYield();
      }
    } catch (err: unknown) {
      failure = err;
      // Stop the worker too (signal 0: no signal, a failure here), and wait for its cleanup.
      this.#worker?.postMessage({ type: "stop", signo: 0 });
    }
    this.summary.files += this.#copier.files;
    this.summary.bytes += this.#copier.bytes;
    if (answer === null) {
      if (failure !== null) throw failure;
      return;
    }
    const reply = await answer;
    this.#worker?.terminate();
    this.#worker = null;
    if (failure !== null) throw failure;
    if (reply.type === "failed") throw new CopyError(reply.message);
    if (reply.type === "stopped") throw new CopyInterrupted(reply.signo);
    this.summary.files += reply.files;
    this.summary.bytes += reply.bytes;
  }

  #startWorker(jobs: FileJob[]): Promise<FromWorker> {
    // The entry module (bundle, compiled binary or mod.ts) serves as the worker's module.
    const worker = new Worker(Deno.mainModule, { type: "module", name: COPY_WORKER_NAME });
    this.#worker = worker;
    const answer = new Promise<FromWorker>((resolve) => {
      worker.onmessage = (event: MessageEvent<FromWorker>) => resolve(event.data);
      worker.onerror = (event: ErrorEvent) => {
        event.preventDefault();
        resolve({ type: "failed", message: `Copy worker failed: ${event.message}` });
      };
    });
    worker.postMessage({ type: "run", jobs, options: this.#options });
    return answer;
  }

  #mkdir(path: string, mode: number, recursive: boolean): void {
    try {
      Deno.mkdirSync(path, { recursive, mode });
    } catch (err: unknown) {
      throw new CopyError(`Cannot create directory "${path}": ${describeError(err)}`);
    }
    this.#touchedDirs.add(dirname(path));
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
    this.#touchedDirs.add(dirname(stage.dest));
  }

  #finishDir(path: string, item: DirItem): void {
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

  #copyLink(item: Extract<Item, { kind: "link" }>, stage: Stage | null): void {
    const temp = stage === null ? tempNameFor(item.dest) : staged(stage, item.dest);
    try {
      Deno.symlinkSync(item.target, temp);
    } catch (err: unknown) {
      throw new CopyError(`Cannot create the link "${item.dest}": ${describeError(err)}`);
    }
    const temps = this.#copier.temps;
    temps.add(temp);
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
      temps.delete(temp);
      this.summary.links++;
    } finally {
      if (temps.delete(temp)) this.#copier.removeTemp(temp);
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
