/**
 * The run's jobs in the spool: `N.json` (the service's), `N.state`, `N.out`, `N.err` (the
 * keeper's). Finished jobs are forgotten oldest first beyond KEEP_FINISHED_JOBS or KEEP_SPOOL_BYTES.
 */

import { COUNTS_FILE, type KeeperState, parseState } from "./contract.ts";
import type { JobCounts, JobOutcome } from "../common/snapshot.ts";
import { readNoFollow, replaceFile } from "../sys/spool.ts";
import { orElse } from "../common/errors.ts";

/** What each job may store of its output, stdout and stderr together (the keeper's cap). */
export const JOB_OUTPUT_CAP = 64 * 1024 * 1024;
/** Finished jobs kept (with their output) for List, Follow and FollowIO. */
export const KEEP_FINISHED_JOBS = 1000;
/** Spool bytes kept for finished jobs, in total. */
export const KEEP_SPOOL_BYTES = 1024 * 1024 * 1024;

/** A job's status, as the contract names it. */
export type JobStatus = "RUNNING" | "SUCCEEDED" | "FAILED" | "CANCELLED";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What `N.json` holds: the service's part. */
export interface JobRecord {
  readonly id: string;
  readonly seq: number;
  readonly argv: readonly string[];
  readonly startedAtMs: number;
  /** Cancel asked, its grace, and whether the job's process was alive then (CANCELLED only so). */
  cancel: { atMs: number; graceMs: number; alive: boolean } | null;
  /** Its keeper recorded no end: it could not start the job, or died and the job is gone. */
  lost?: { atMs: number; reason: string };
}

/** The exit code of a job whose end its keeper never recorded: how it ended cannot be known. */
export const LOST_EXIT = 125;

/** A spool file's size; 0 if it is not there (not written yet, or forgotten). */
function sizeOf(path: string): number {
  return orElse(() => Deno.lstatSync(path).size, 0);
}

/** A job and everything known about it. */
export class Job {
  readonly record: JobRecord;
  readonly id: string;
  readonly seq: number;
  state: KeeperState | null = null;
  stdoutBytes = 0;
  stderrBytes = 0;
  /** Resolved once the keeper said the job runs (or could not start it). */
  readonly started = Promise.withResolvers<void>();
  readonly #dir: string;
  readonly #waiters = new Set<() => void>();

  constructor(dir: string, record: JobRecord) {
    this.#dir = dir;
    this.record = record;
    this.id = record.id;
    this.seq = record.seq;
  }

  /** A new job: its record written before its keeper starts. */
  static create(dir: string, id: string, seq: number, argv: readonly string[]): Job {
    const job = new Job(dir, { id, seq, argv, startedAtMs: Date.now(), cancel: null });
    job.save();
    return job;
  }

  /** The path of one of its files: "json", "state", "out" or "err". */
  path(kind: string): string {
    return `${this.#dir}/${this.seq}.${kind}`;
  }

  get pid(): number {
    return this.state?.pid ?? 0;
  }

  /** How it ended (exit -1: by a signal; signal 0: an exit), or was found lost; null: it runs. */
  get end(): { exit: number; signal: number; atMs: number } | null {
    const s = this.state;
    if (s !== null && (s.exit >= 0 || s.signal > 0)) {
      return { exit: s.exit, signal: s.signal, atMs: s.finished };
    }
    const lost = this.record.lost;
    return lost === undefined ? null : { exit: LOST_EXIT, signal: 0, atMs: lost.atMs };
  }

  get finished(): boolean {
    return this.end !== null;
  }

  get outputEnded(): boolean {
    return this.state?.ended === 1 || this.record.lost !== undefined;
  }

  get status(): JobStatus {
    const end = this.end;
    if (end === null) return "RUNNING";
    const clean = end.exit === 0 && end.signal === 0;
    if (this.record.cancel?.alive === true && !clean) return "CANCELLED";
    return clean ? "SUCCEEDED" : "FAILED";
  }

  /** Writes the record (whole: a new file renamed over the old). */
  save(): void {
    replaceFile(this.path("json"), encoder.encode(JSON.stringify(this.record)));
  }

  /** Reads what the keeper wrote; wakes the waiters if anything changed. */
  refresh(): void {
    const bytes = readNoFollow(this.path("state"));
    const state = bytes === null ? null : parseState(decoder.decode(bytes));
    const stdout = sizeOf(this.path("out"));
    const stderr = sizeOf(this.path("err"));
    const before = JSON.stringify([this.state, this.stdoutBytes, this.stderrBytes]);
    if (state !== null) this.state = state;
    this.stdoutBytes = stdout;
    this.stderrBytes = stderr;
    if (this.state !== null) this.started.resolve();
    if (JSON.stringify([this.state, stdout, stderr]) !== before) this.notify();
  }

  /** Resolves at the next change (status or output). */
  changed(): Promise<void> {
    return new Promise((resolve) => this.#waiters.add(resolve));
  }

  notify(): void {
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }

  remove(): void {
    for (const kind of ["out", "err", "state", "json"]) {
      orElse(() => Deno.removeSync(this.path(kind)), undefined); // gone already: nothing to free
    }
  }
}

/** The run's records in `dir`, oldest first (a restarted service reads them back). */
export function readRecords(dir: string): JobRecord[] {
  const records: JobRecord[] = [];
  for (const entry of Deno.readDirSync(dir)) {
    if (!/^\d+\.json$/.test(entry.name)) continue;
    const bytes = readNoFollow(`${dir}/${entry.name}`);
    // Not JSON: a record is replaced whole, so this is not one of ours.
    const record = bytes === null ? null : orElse(() => JSON.parse(decoder.decode(bytes)), null);
    if (record !== null) records.push(record as JobRecord);
  }
  return records.sort((a, b) => a.seq - b.seq);
}

/** Outcomes of the jobs forgotten so far (the counters go on counting them). */
type Forgotten = Record<JobOutcome, number>;

/** The counter of a finished job's status. */
function outcomeOf(status: JobStatus): JobOutcome {
  return status === "SUCCEEDED" ? "succeeded" : status === "FAILED" ? "failed" : "cancelled";
}

/** Every job of this run, by id; finished ones forgotten oldest first beyond the limits. */
export class JobTable {
  readonly #dir: string;
  readonly #jobs = new Map<string, Job>();
  readonly #bySeq = new Map<number, Job>();
  readonly #forgotten: Forgotten;

  /** The table of the run in `dir`, with every job an earlier service left there. */
  constructor(dir: string) {
    this.#dir = dir;
    const bytes = readNoFollow(`${dir}/forgotten.json`);
    this.#forgotten = bytes === null
      ? { succeeded: 0, failed: 0, cancelled: 0 }
      : JSON.parse(decoder.decode(bytes)) as Forgotten;
    for (const record of readRecords(dir)) {
      const job = new Job(dir, record);
      job.refresh();
      this.add(job);
    }
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

  /** Drops a job and its files. */
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
    return Math.max(0, ...this.#bySeq.keys());
  }

  /** Forgets finished jobs whose output ended, oldest first, while over a limit. */
  trim(): void {
    const done = this.list().filter((job) => job.finished && job.outputEnded);
    let count = done.length;
    let bytes = done.reduce((sum, job) => sum + job.stdoutBytes + job.stderrBytes, 0);
    let changed = false;
    for (const job of done) {
      if (count <= KEEP_FINISHED_JOBS && bytes <= KEEP_SPOOL_BYTES) break;
      this.drop(job);
      this.#forgotten[outcomeOf(job.status)]++;
      changed = true;
      count--;
      bytes -= job.stdoutBytes + job.stderrBytes;
    }
    if (changed) this.#write("forgotten.json", this.#forgotten);
  }

  counts(): JobCounts {
    const f = this.#forgotten;
    const counts = { running: 0, started: f.succeeded + f.failed + f.cancelled, ...f };
    for (const job of this.#jobs.values()) {
      counts.started++;
      if (job.status === "RUNNING") counts.running++;
      else counts[outcomeOf(job.status)]++;
    }
    return counts;
  }

  /** Writes the counts where denit's health endpoint reads them (COUNTS_FILE). */
  saveCounts(): void {
    this.#write(COUNTS_FILE, this.counts());
  }

  /** Replaces a file of the table's own; on a full disk the old stays until the next change. */
  #write(name: string, value: unknown): void {
    const bytes = encoder.encode(JSON.stringify(value));
    orElse(() => replaceFile(`${this.#dir}/${name}`, bytes), undefined);
  }
}
