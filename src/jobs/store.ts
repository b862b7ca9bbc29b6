/**
 * The jobs of this run and their spooled output. A job's stdout and stderr go to two files in
 * the spool directory, at most JOB_OUTPUT_CAP bytes together (what comes beyond is read from
 * the pipe and dropped, and the job is marked truncated); finished jobs are forgotten oldest
 * first beyond KEEP_FINISHED_JOBS jobs or KEEP_SPOOL_BYTES bytes of spool.
 */

import type { JobCounts } from "../common/jobs.ts";
import { closeFd, createSpoolFile, pipeErrnoMessage, writeAll } from "../sys/pipes.ts";

/** What each job may store of its output, stdout and stderr together. */
export const JOB_OUTPUT_CAP = 64 * 1024 * 1024;
/** Finished jobs kept (with their output) for List, Follow and FollowIO. */
export const KEEP_FINISHED_JOBS = 1000;
/** Spool bytes kept for finished jobs, in total. */
export const KEEP_SPOOL_BYTES = 1024 * 1024 * 1024;

/** A job's status, as the contract names it. */
export type JobStatus = "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED";

/** One stream's spool. */
export class Spool {
  readonly path: string;
  #fd: number;
  /** Bytes stored in the file (what FollowIO can send). */
  stored = 0;
  /** The pipe ended: no more bytes will be stored. */
  ended = false;

  constructor(path: string) {
    this.path = path;
    const fd = createSpoolFile(path);
    if (fd < 0) throw new Error(`Cannot create "${path}": ${pipeErrnoMessage(-fd)}`);
    this.#fd = fd;
  }

  /** Appends up to `room` bytes; returns how many were stored. */
  append(buffer: Uint8Array<ArrayBuffer>, length: number, room: number): number {
    const n = Math.min(length, room);
    if (n <= 0 || this.#fd < 0) return 0;
    const rc = writeAll(this.#fd, buffer, n);
    if (rc < 0) return 0; // a full disk: the bytes are lost, and counted as beyond the cap
    this.stored += n;
    return n;
  }

  end(): void {
    this.ended = true;
    if (this.#fd >= 0) closeFd(this.#fd);
    this.#fd = -1;
  }

  remove(): void {
    this.end();
    try {
      Deno.removeSync(this.path);
    } catch {
      // Already gone: nothing to free.
    }
  }
}

/** A job and everything known about it. */
export class Job {
  readonly id: string;
  readonly seq: number;
  readonly argv: readonly string[];
  readonly stdout: Spool;
  readonly stderr: Spool;
  pid = 0;
  status: JobStatus = "RUNNING";
  exitCode = 0;
  signal = "";
  startedAtMs = Date.now();
  finishedAtMs = 0;
  truncated = false;
  cancelRequested = false;
  /** Resolved once the supervisor answered the spawn (started or not). */
  readonly spawned = Promise.withResolvers<void>();
  /** Resolved when Cancel's wait is over: the job's process group is empty. */
  groupGone: PromiseWithResolvers<void> | null = null;
  readonly #waiters = new Set<() => void>();

  constructor(id: string, seq: number, argv: readonly string[], spoolDir: string) {
    this.id = id;
    this.seq = seq;
    this.argv = argv;
    const base = `${spoolDir}/${Deno.pid}-${seq}`;
    this.stdout = new Spool(`${base}.out`);
    try {
      this.stderr = new Spool(`${base}.err`);
    } catch (err: unknown) {
      this.stdout.remove();
      throw err;
    }
  }

  get finished(): boolean {
    return this.status !== "RUNNING";
  }

  get outputEnded(): boolean {
    return this.stdout.ended && this.stderr.ended;
  }

  /** Stores output, within the job's cap. */
  store(spool: Spool, buffer: Uint8Array<ArrayBuffer>, length: number): void {
    const room = JOB_OUTPUT_CAP - this.stdout.stored - this.stderr.stored;
    if (spool.append(buffer, length, room) < length) this.truncated = true;
    this.notify();
  }

  /** Ends the job: an exit code, or a signal name. */
  finish(code: number | null, signal: string | null): void {
    this.exitCode = code ?? 0;
    this.signal = signal ?? "";
    this.finishedAtMs = Date.now();
    this.status = this.cancelRequested
      ? "CANCELLED"
      : code === 0 && signal === null
      ? "SUCCEEDED"
      : "FAILED";
    this.notify();
  }

  /** Resolves at the next change (status or output). */
  changed(): Promise<void> {
    return new Promise((resolve) => this.#waiters.add(resolve));
  }

  notify(): void {
    if (this.#waiters.size === 0) return;
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }
}

/** Every job of this run, by id; finished ones forgotten oldest first beyond the limits. */
export class JobTable {
  readonly #jobs = new Map<string, Job>();
  #started = 0;
  #outcomes = { SUCCEEDED: 0, FAILED: 0, CANCELLED: 0 };

  get(id: string): Job | undefined {
    return this.#jobs.get(id);
  }

  add(job: Job): void {
    this.#jobs.set(job.id, job);
    this.#started++;
  }

  /** Jobs in the order they were started. */
  list(): Job[] {
    return [...this.#jobs.values()];
  }

  /** Counts a job that finished, then forgets the oldest finished ones beyond the limits. */
  finished(job: Job): void {
    if (job.status !== "RUNNING") this.#outcomes[job.status]++;
    this.trim();
  }

  /** Forgets finished jobs whose output ended, oldest first, while over a limit. */
  trim(): void {
    const done = this.list().filter((job) => job.finished && job.outputEnded);
    let count = done.length;
    let bytes = done.reduce((sum, job) => sum + job.stdout.stored + job.stderr.stored, 0);
    for (const job of done) {
      if (count <= KEEP_FINISHED_JOBS && bytes <= KEEP_SPOOL_BYTES) break;
      this.#jobs.delete(job.id);
      job.stdout.remove();
      job.stderr.remove();
      count--;
      bytes -= job.stdout.stored + job.stderr.stored;
    }
  }

  counts(): JobCounts {
    let running = 0;
    for (const job of this.#jobs.values()) if (!job.finished) running++;
    return {
      running,
      started: this.#started,
      succeeded: this.#outcomes.SUCCEEDED,
      failed: this.#outcomes.FAILED,
      cancelled: this.#outcomes.CANCELLED,
    };
  }
}
