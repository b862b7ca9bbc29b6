/**
 * The jobs of this run of denit, kept where a restarted service finds them: the spool directory
 * of the run (`SPOOL/denit-PID-START`, one per run of denit). For each job, `N.json` (what it
 * is and, once it ended, how), `N.out` and `N.err` (its output, moved there from its pipes by
 * splice(2), so that a service killed at any moment loses no byte and stores none twice). A
 * job's stdout and stderr together keep at most JOB_OUTPUT_CAP bytes (what comes beyond is read
 * from the pipe and dropped, and the job is marked truncated); finished jobs are forgotten
 * oldest first beyond KEEP_FINISHED_JOBS jobs or KEEP_SPOOL_BYTES bytes of spool.
 */

import type { JobCounts } from "../common/jobs.ts";
import {
  closeFd,
  errnoMessage,
  fileSize,
  openSpoolFile,
  readNoFollow,
  readSome,
  replaceFile,
  spliceInto,
  writeAt,
} from "../sys/pipes.ts";

/** What each job may store of its output, stdout and stderr together. */
export const JOB_OUTPUT_CAP = 64 * 1024 * 1024;
/** Finished jobs kept (with their output) for List, Follow and FollowIO. */
export const KEEP_FINISHED_JOBS = 1000;
/** Spool bytes kept for finished jobs, in total. */
export const KEEP_SPOOL_BYTES = 1024 * 1024 * 1024;

/** A job's status, as the contract names it. */
export type JobStatus = "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A spool file's text, never read through a link (throws if it cannot be read). */
function readText(path: string): string {
  const bytes = readNoFollow(path);
  if (bytes === null) throw new Error(`Cannot read "${path}"`);
  return decoder.decode(bytes);
}

const EAGAIN = 11;
const EINTR = 4;
/** One splice's most: a pipe holds 64 KiB by default. */
const SPLICE_BYTES = 1024 * 1024;
/** Moves from one pipe before the others get a turn. */
const MOVES_PER_TURN = 16;

/** One stream's spool file. */
export class Spool {
  readonly path: string;
  #fd: number;
  /** Where the next byte goes: the bytes stored so far (what FollowIO can send). */
  readonly #at = new BigInt64Array(16); // larger than V8 keeps on its heap
  /** The pipe ended: no more bytes will be stored. */
  ended = false;

  /** A new, empty spool file; or, `keep`, the one an earlier service left (resumed at its end). */
  constructor(path: string, keep = false) {
    this.path = path;
    const fd = openSpoolFile(path, keep);
    if (fd < 0) throw new Error(`Cannot open "${path}": ${errnoMessage(-fd)}`);
    this.#fd = fd;
    this.#at[0] = BigInt(keep ? Math.max(0, fileSize(fd)) : 0);
  }

  get stored(): number {
    return Number(this.#at[0]);
  }

  /**
   * Moves what the pipe `from` holds into the file, at most `room` bytes (what comes beyond is
   * read and dropped, into `scratch`). Returns "ended" when every writer is gone, "wait" when
   * the pipe is empty for now; `dropped` counts the bytes beyond the cap.
   */
  take(from: number, room: () => number, scratch: Uint8Array<ArrayBuffer>): {
    outcome: "ended" | "wait" | "more";
    dropped: number;
  } {
    let dropped = 0;
    for (let move = 0; move < MOVES_PER_TURN; move++) {
      const space = room();
      const n = space > 0 && this.#fd >= 0
        ? spliceInto(from, this.#fd, this.#at, Math.min(space, SPLICE_BYTES))
        : readSome(from, scratch);
      if (n > 0) {
        if (space <= 0 || this.#fd < 0) dropped += n;
        continue;
      }
      if (n === -EINTR) continue;
      if (n === -EAGAIN) return { outcome: "wait", dropped };
      // 0: the end; any other error ends the pipe too (nothing more can come from it).
      return { outcome: "ended", dropped };
    }
    return { outcome: "more", dropped };
  }

  /** denit's own line for the job (why it could not start), stored as its output. */
  note(text: string): void {
    const bytes = new TextEncoder().encode(text);
    if (this.#fd < 0 || writeAt(this.#fd, bytes, this.stored) < 0) return;
    this.#at[0] = BigInt(this.stored + bytes.length);
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

/** What `N.json` holds. */
export interface JobRecord {
  readonly id: string;
  readonly seq: number;
  readonly argv: readonly string[];
  readonly startedAtMs: number;
  pid: number;
  status: JobStatus;
  exitCode: number;
  signal: string;
  finishedAtMs: number;
  truncated: boolean;
  /** Cancel asked, with its grace: a restarted service sends the SIGKILL still due. */
  cancel: { atMs: number; graceMs: number } | null;
  /** The job's output ended (both pipes): nothing more will be stored. */
  outputEnded: boolean;
}

/** A job and everything known about it. */
export class Job {
  readonly record: JobRecord;
  readonly stdout: Spool;
  readonly stderr: Spool;
  readonly #dir: string;
  /** Resolved once denit answered the spawn (started or not). */
  readonly spawned = Promise.withResolvers<void>();
  /** Resolved when Cancel's wait is over: the job's process group is empty. */
  groupGone: PromiseWithResolvers<void> | null = null;
  readonly #waiters = new Set<() => void>();

  private constructor(dir: string, record: JobRecord, keep: boolean) {
    this.#dir = dir;
    this.record = record;
    this.stdout = new Spool(`${dir}/${record.seq}.out`, keep);
    try {
      this.stderr = new Spool(`${dir}/${record.seq}.err`, keep);
    } catch (err: unknown) {
      this.stdout.remove();
      throw err;
    }
    if (record.outputEnded) {
      this.stdout.end();
      this.stderr.end();
    }
  }

  /** A new job: its record written before denit is asked to start it. */
  static create(dir: string, id: string, seq: number, argv: readonly string[]): Job {
    const record: JobRecord = {
      id,
      seq,
      argv,
      startedAtMs: Date.now(),
      pid: 0,
      status: "RUNNING",
      exitCode: 0,
      signal: "",
      finishedAtMs: 0,
      truncated: false,
      cancel: null,
      outputEnded: false,
    };
    const job = new Job(dir, record, false);
    try {
      job.save();
    } catch (err: unknown) {
      job.remove();
      throw err;
    }
    return job;
  }

  /** The job an earlier service of this run left in `dir`. */
  static resume(dir: string, record: JobRecord): Job {
    const job = new Job(dir, record, true);
    if (record.status !== "RUNNING" || record.pid !== 0) job.spawned.resolve();
    return job;
  }

  get id(): string {
    return this.record.id;
  }

  get seq(): number {
    return this.record.seq;
  }

  get finished(): boolean {
    return this.record.status !== "RUNNING";
  }

  get outputEnded(): boolean {
    return this.stdout.ended && this.stderr.ended;
  }

  /** Writes the record (whole: a new file renamed over the old). */
  save(): void {
    replaceFile(`${this.#dir}/${this.seq}.json`, encoder.encode(JSON.stringify(this.record)));
  }

  /** Room left under the cap, for either stream. */
  room(): number {
    return JOB_OUTPUT_CAP - this.stdout.stored - this.stderr.stored;
  }

  /** Ends the job: an exit code or a signal's name; CANCELLED if Cancel reached it alive. */
  finish(code: number | null, signal: string | null, cancelled: boolean): void {
    this.record.exitCode = code ?? 0;
    this.record.signal = signal ?? "";
    this.record.finishedAtMs = Date.now();
    this.record.status = cancelled
      ? "CANCELLED"
      : code === 0 && signal === null
      ? "SUCCEEDED"
      : "FAILED";
    this.save();
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

  /** Removes its files. */
  remove(): void {
    this.stdout.remove();
    this.stderr.remove();
    try {
      Deno.removeSync(`${this.#dir}/${this.seq}.json`);
    } catch {
      // Already gone.
    }
  }
}

/** The run's records in `dir`, oldest first (a restarted service reads them back). */
export function readRecords(dir: string): JobRecord[] {
  const records: JobRecord[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    if (!/^\d+\.json$/.test(entry.name)) continue;
    try {
      records.push(JSON.parse(readText(`${dir}/${entry.name}`)) as JobRecord);
    } catch {
      // Unreadable: a record is replaced whole, so this is not one of ours.
    }
  }
  return records.sort((a, b) => a.seq - b.seq);
}

/** Outcomes of the jobs forgotten so far (the counters go on counting them). */
type Forgotten = { succeeded: number; failed: number; cancelled: number };

/** Every job of this run, by id; finished ones forgotten oldest first beyond the limits. */
export class JobTable {
  readonly #dir: string;
  readonly #jobs = new Map<string, Job>();
  readonly #bySeq = new Map<number, Job>();
  readonly #forgotten: Forgotten;

  /** The table of the run in `dir` (the counts of what an earlier service forgot included). */
  constructor(dir: string) {
    this.#dir = dir;
    let forgotten: Forgotten = { succeeded: 0, failed: 0, cancelled: 0 };
    try {
      forgotten = JSON.parse(readText(`${dir}/forgotten.json`)) as Forgotten;
    } catch {
      // None forgotten yet.
    }
    this.#forgotten = forgotten;
  }

  get(id: string): Job | undefined {
    return this.#jobs.get(id);
  }

  bySeq(seq: number): Job | undefined {
    return this.#bySeq.get(seq);
  }

  add(job: Job): void {
    this.#jobs.set(job.id, job);
    this.#bySeq.set(job.seq, job);
  }

  /** Drops a job that never started (denit refused it), and its files. */
  drop(job: Job): void {
    this.#jobs.delete(job.id);
    this.#bySeq.delete(job.seq);
    job.remove();
  }

  /** Jobs in the order they were started. */
  list(): Job[] {
    return [...this.#jobs.values()];
  }

  /** The highest seq known (the next job takes the one after it). */
  lastSeq(): number {
    let last = 0;
    for (const seq of this.#bySeq.keys()) last = Math.max(last, seq);
    return last;
  }

  /** Forgets finished jobs whose output ended, oldest first, while over a limit. */
  trim(): void {
    const done = this.list().filter((job) => job.finished && job.outputEnded);
    let count = done.length;
    let bytes = done.reduce((sum, job) => sum + job.stdout.stored + job.stderr.stored, 0);
    let changed = false;
    for (const job of done) {
      if (count <= KEEP_FINISHED_JOBS && bytes <= KEEP_SPOOL_BYTES) break;
      this.#jobs.delete(job.id);
      this.#bySeq.delete(job.seq);
      const status = job.record.status;
      if (status === "SUCCEEDED") this.#forgotten.succeeded++;
      else if (status === "FAILED") this.#forgotten.failed++;
      else this.#forgotten.cancelled++;
      changed = true;
      job.remove();
      count--;
      bytes -= job.stdout.stored + job.stderr.stored;
    }
    if (!changed) return;
    replaceFile(`${this.#dir}/forgotten.json`, encoder.encode(JSON.stringify(this.#forgotten)));
  }

  counts(): JobCounts {
    const f = this.#forgotten;
    const counts = {
      running: 0,
      started: f.succeeded + f.failed + f.cancelled,
      succeeded: f.succeeded,
      failed: f.failed,
      cancelled: f.cancelled,
    };
    for (const job of this.#jobs.values()) {
      counts.started++;
      if (job.record.status === "RUNNING") counts.running++;
      else if (job.record.status === "SUCCEEDED") counts.succeeded++;
      else if (job.record.status === "FAILED") counts.failed++;
      else counts.cancelled++;
    }
    return counts;
  }
}
