/**
 * The five calls of `denit.jobs.v1.Jobs` over the job table: what each checks, what it waits
 * for, and what it answers. denit starts, signals and reaps (through the control channel); the
 * pump moves the output into the spool; this module reads it. The table lives in the spool
 * directory (store.ts): a service started again after a crash takes up every job where it was.
 */

import type { FromJobHost, JobCounts, JobEnd, ToJobHost } from "../common/jobs.ts";
import { SIGTERM } from "../common/signals.ts";
import { closeFd, trimHeap } from "../sys/pipes.ts";
import type { Pump } from "./pump.ts";
import { Job, type JobRecord, JobTable, readRecords, type Spool } from "./store.ts";

/** Cancel's default time between TERM and KILL. */
export const DEFAULT_CANCEL_GRACE_MS = 10_000;
/** The most Cancel may be asked to wait between TERM and KILL. */
export const MAX_CANCEL_GRACE_MS = 24 * 60 * 60 * 1000;
/** A job's argv and env together, as UTF-8 bytes (the kernel's own limit is about 2 MiB). */
export const MAX_RUN_BYTES = 128 * 1024;
/** Jobs running at once. */
export const MAX_RUNNING_JOBS = 256;
/** Follow and FollowIO streams open at once, over every connection. */
export const MAX_STREAMS = 128;
/** List's largest page: at most this many jobs, and about this many bytes of them. */
export const LIST_PAGE_JOBS = 1000;
const LIST_PAGE_BYTES = 1024 * 1024;
/** FollowIO's largest message. */
const OUTPUT_CHUNK = 256 * 1024;
/** The heap is trimmed after a stream at most this often. */
const TRIM_EVERY_MS = 1000;

const SIGKILL = 9;
const ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
const ENV_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
const encoder = new TextEncoder();

/** A request the service refuses: the gRPC status name and a one-line reason. */
export class JobsError extends Error {
  override name = "JobsError";
  constructor(
    readonly code: "INVALID_ARGUMENT" | "NOT_FOUND" | "UNAVAILABLE" | "RESOURCE_EXHAUSTED",
    message: string,
  ) {
    super(message);
  }
}

/** The job as the contract's `Job` message. */
export interface JobMessage {
  id: string;
  status: string;
  argv: readonly string[];
  pid: number;
  exitCode: number;
  signal: string;
  startedAtMs: number;
  finishedAtMs: number;
  stdoutBytes: number;
  stderrBytes: number;
  outputTruncated: boolean;
}

/** One FollowIO message. */
export interface OutputMessage {
  stdout?: Uint8Array;
  stderr?: Uint8Array;
  stdoutOffset: number;
  stderrOffset: number;
  truncated?: boolean;
}

/** A server stream as the calls see it: write with back-pressure, and whether the client left. */
export interface Outlet<T> {
  /** Resolves when the message may be followed by another (the transport took it). */
  write(message: T): Promise<void>;
  readonly gone: boolean;
  /** Resolves when the client leaves. */
  readonly left: Promise<void>;
}

function jobMessage(job: Job): JobMessage {
  const r = job.record;
  return {
    id: r.id,
    status: r.status,
    argv: r.argv,
    pid: r.pid,
    exitCode: r.exitCode,
    signal: r.signal,
    startedAtMs: r.startedAtMs,
    finishedAtMs: r.finishedAtMs,
    stdoutBytes: job.stdout.stored,
    stderrBytes: job.stderr.stored,
    outputTruncated: r.truncated,
  };
}

function hasNul(text: string): boolean {
  return text.includes("\0");
}

/** The fields of RunRequest, as decoded. */
export interface RunFields {
  id: string;
  argv: readonly string[];
  workDir: string;
  env: Readonly<Record<string, string>>;
}

/** The fields of ListRequest, as decoded. */
export interface ListFields {
  afterId: string;
  limit: number;
  ids: readonly string[];
}

/** The job service's state in its process. */
export class JobService {
  readonly #table: JobTable;
  readonly #pump: Pump;
  readonly #dir: string;
  readonly #send: (message: ToJobHost) => void;
  readonly #scratch = new Uint8Array(64 * 1024);
  /** Cancel's TERM, answered by denit: whether the job's own process was alive then. */
  readonly #signalled = new Map<number, Array<(alive: boolean) => void>>();
  /** Jobs a Cancel reached alive: they end CANCELLED. */
  readonly #cancelled = new Set<number>();
  #seq: number;
  #stopping = false;
  #streams = 0;
  #trimmedAtMs = -Infinity;

  /** The table of the run in `dir`, with every job an earlier service of this run left there. */
  constructor(pump: Pump, dir: string, send: (message: ToJobHost) => void) {
    this.#pump = pump;
    this.#dir = dir;
    this.#send = send;
    this.#table = new JobTable(dir);
    for (const record of readRecords(dir)) {
      this.#table.add(Job.resume(dir, record));
      if (record.cancel !== null) this.#cancelled.add(record.seq);
    }
    this.#seq = this.#table.lastSeq();
  }

  /** A message from denit, with the descriptors that came with it. */
  fromHost(message: FromJobHost, fds: readonly number[]): void {
    switch (message.type) {
      case "stopping":
        this.#stopping = true;
        return;
      case "resumed":
        return this.#resumed();
      case "spawned":
        return this.#spawned(message.seq, message.pid, fds);
      case "job":
        return this.#resume(message, fds);
      default:
        break;
    }
    for (const fd of fds) closeFd(fd); // only spawned and job carry descriptors
    const job = this.#table.bySeq(message.seq);
    switch (message.type) {
      case "not-started": {
        if (job === undefined) return;
        // As a shell would: the reason on the job's stderr, and 126 or 127 as its exit code.
        job.stderr.note(`denit: ${message.message}\n`);
        job.stdout.end();
        job.stderr.end();
        job.record.outputEnded = true;
        job.spawned.resolve();
        return this.#ended(job, { code: message.exitCode, signal: null });
      }
      case "refused":
        if (job === undefined) return;
        this.#stopping = true;
        this.#table.drop(job);
        job.spawned.promise.catch(() => {/* Run answers with it */});
        job.spawned.reject(new JobsError("UNAVAILABLE", message.message));
        this.#publish();
        return;
      case "exited":
        if (job !== undefined) this.#ended(job, message);
        return;
      case "group-gone":
        job?.groupGone?.resolve();
        return;
      case "signalled": {
        const waiters = this.#signalled.get(message.seq) ?? [];
        this.#signalled.delete(message.seq);
        for (const answer of waiters) answer(message.alive);
        return;
      }
    }
  }

  #spawned(seq: number, pid: number, fds: readonly number[]): void {
    const job = this.#table.bySeq(seq);
    if (job === undefined) {
      for (const fd of fds) closeFd(fd);
      return;
    }
    job.record.pid = pid;
    job.save();
    this.#connect(job, fds);
    job.spawned.resolve();
    this.#publish();
  }

  /** After a restart: a job denit holds, its pipes (while its output goes on), its end. */
  #resume(message: Extract<FromJobHost, { type: "job" }>, fds: readonly number[]): void {
    const job = this.#table.bySeq(message.seq);
    if (job === undefined) {
      for (const fd of fds) closeFd(fd);
      return;
    }
    job.record.pid = message.pid;
    job.spawned.resolve();
    this.#held.add(job.seq);
    this.#connect(job, fds);
    if (message.groupGone) job.groupGone?.resolve();
    if (message.end !== null && !job.finished) this.#ended(job, message.end);
    this.#resumeCancel(job);
  }

  /** Every job denit holds was sent: a running one it did not name never started. */
  #resumed(): void {
    const held = this.#held;
    this.#held = new Set();
    for (const job of this.#table.list()) {
      job.spawned.resolve();
      const unstarted = !job.finished && !held.has(job.seq);
      if (unstarted) {
        job.stderr.note("denit: the job service restarted before the job could start\n");
      }
      if (!job.outputEnded && !this.#connected.has(job.seq)) {
        job.stdout.end();
        job.stderr.end();
        job.record.outputEnded = true;
        job.save();
      }
      if (unstarted) this.#ended(job, { code: 125, signal: null });
    }
    this.#publish();
  }

  /** A cancel under way when the service died: its SIGKILL is still due. */
  #resumeCancel(job: Job): void {
    const cancel = job.record.cancel;
    if (cancel === null || job.groupGone !== null) return;
    job.groupGone = Promise.withResolvers<void>();
    this.#send({ type: "watch-group", seq: job.seq });
    // Epoch times, across processes: a step of the wall clock may shorten the wait, never
    // stretch it past a whole grace from now.
    this.#killAfter(job, Math.min(cancel.graceMs, cancel.atMs + cancel.graceMs - Date.now()));
  }

  /** Jobs denit said it holds, since the service started (until "resumed"). */
  #held = new Set<number>();

  /** Jobs whose pipes are in the pump now. */
  readonly #connected = new Set<number>();

  /** The pump moves these pipes (stdout's, then stderr's read end) into the spool. */
  #connect(job: Job, fds: readonly number[]): void {
    const [out, err] = fds;
    if (out === undefined || err === undefined) {
      for (const fd of fds) closeFd(fd);
      return;
    }
    this.#connected.add(job.seq);
    for (const [spool, fd] of [[job.stdout, out], [job.stderr, err]] as const) {
      this.#pump.add(fd, { readable: (pipe) => this.#take(job, spool, pipe) });
    }
  }

  #take(job: Job, spool: Spool, pipe: number): boolean {
    const { outcome, dropped } = spool.take(pipe, () => job.room(), this.#scratch);
    if (dropped > 0 && !job.record.truncated) {
      job.record.truncated = true;
      job.save();
    }
    job.notify();
    if (outcome !== "ended") return false;
    spool.end();
    if (job.outputEnded) {
      job.record.outputEnded = true;
      job.save();
      this.#connected.delete(job.seq);
      this.#send({ type: "output-done", seq: job.seq });
      if (job.finished) this.#table.trim();
    }
    return true;
  }

  #ended(job: Job, end: JobEnd): void {
    // Alive at the TERM yet exiting 0: it was already on its way out (or ended well anyway).
    const cancelled = this.#cancelled.has(job.seq) && end.code !== 0;
    if (!job.finished) job.finish(end.code, end.signal, cancelled);
    // Recorded: denit may forget it.
    this.#send({ type: "forget", seq: job.seq });
    if (job.outputEnded) this.#table.trim();
    this.#publish();
  }

  #publish(): void {
    const counts: JobCounts = this.#table.counts();
    this.#send({ type: "counts", counts });
  }

  /** Run: a new job, or the one that has this id already. */
  async run(fields: RunFields): Promise<JobMessage> {
    const { id, argv } = fields;
    if (!ID_PATTERN.test(id)) {
      throw new JobsError(
        "INVALID_ARGUMENT",
        `invalid id "${id.slice(0, 140)}": use 1 to 128 letters, digits, '.', '_', ':' or '-'`,
      );
    }
    const existing = this.#table.get(id);
    if (existing !== undefined) {
      await existing.spawned.promise;
      return jobMessage(existing);
    }
    if (this.#stopping) throw new JobsError("UNAVAILABLE", "denit is stopping: no new jobs");
    if (argv.length === 0 || argv[0] === "") {
      throw new JobsError("INVALID_ARGUMENT", "argv is empty: name the program to run");
    }
    if (argv.some(hasNul)) throw new JobsError("INVALID_ARGUMENT", "argv holds a NUL byte");
    const env: string[] = [];
    for (const [key, value] of Object.entries(fields.env)) {
      if (!ENV_KEY_PATTERN.test(key)) {
        throw new JobsError(
          "INVALID_ARGUMENT",
          `invalid env key "${key.slice(0, 140)}": must match ^[A-Za-z_][A-Za-z0-9_]*$`,
        );
      }
      if (hasNul(value)) throw new JobsError("INVALID_ARGUMENT", `env ${key} holds a NUL byte`);
      env.push(`${key}=${value}`);
    }
    const bytes = [...argv, ...env].reduce((sum, s) => sum + encoder.encode(s).length + 1, 0);
    if (bytes > MAX_RUN_BYTES) {
      throw new JobsError(
        "INVALID_ARGUMENT",
        `argv and env hold ${bytes} bytes: at most ${MAX_RUN_BYTES} (128 KiB) a job`,
      );
    }
    if (this.#table.counts().running >= MAX_RUNNING_JOBS) {
      throw new JobsError("RESOURCE_EXHAUSTED", `${MAX_RUNNING_JOBS} jobs run already`);
    }
    const workDir = fields.workDir === "" ? null : fields.workDir;
    if (workDir !== null) this.#checkDirectory(workDir);
    let job: Job;
    try {
      job = Job.create(this.#dir, id, ++this.#seq, Object.freeze([...argv]));
    } catch (err: unknown) {
      throw new JobsError("UNAVAILABLE", `cannot spool output: ${String(err)}`);
    }
    this.#table.add(job);
    this.#send({ type: "run", seq: job.seq, argv, workDir, env });
    this.#publish();
    await job.spawned.promise;
    return jobMessage(job);
  }

  #checkDirectory(path: string): void {
    let isDirectory = false;
    try {
      isDirectory = Deno.statSync(path).isDirectory;
    } catch {
      // Missing or unreadable: said below.
    }
    if (!isDirectory) {
      throw new JobsError("INVALID_ARGUMENT", `work_dir "${path}" is not a directory`);
    }
  }

  #find(id: string): Job {
    const job = this.#table.get(id);
    if (job === undefined) throw new JobsError("NOT_FOUND", `no job "${id.slice(0, 140)}"`);
    return job;
  }

  /** A stream's place among MAX_STREAMS, given back when `work` ends. */
  async #stream<T>(work: () => Promise<T>): Promise<T> {
    if (this.#streams >= MAX_STREAMS) {
      throw new JobsError("RESOURCE_EXHAUSTED", `${MAX_STREAMS} streams are open already`);
    }
    this.#streams++;
    try {
      return await work();
    } finally {
      this.#streams--;
    }
  }

  /** Follow: the job now, then at every change of status, until it has finished. */
  follow(id: string, out: Outlet<JobMessage>): Promise<void> {
    const job = this.#find(id);
    return this.#stream(async () => {
      await job.spawned.promise;
      let last = "";
      for (;;) {
        const message = jobMessage(job);
        const key = `${message.status}/${message.pid}`;
        if (key !== last) {
          last = key;
          await out.write(message);
        }
        if (job.finished || out.gone) return;
        await Promise.race([job.changed(), out.left]);
      }
    });
  }

  /** FollowIO: both streams from the offsets given, stored bytes first, until output ends. */
  followIO(
    id: string,
    offsets: { stdout: number; stderr: number },
    out: Outlet<OutputMessage>,
  ): Promise<void> {
    const job = this.#find(id);
    return this.#stream(() => this.#followIO(job, offsets, out));
  }

  async #followIO(
    job: Job,
    offsets: { stdout: number; stderr: number },
    out: Outlet<OutputMessage>,
  ): Promise<void> {
    const at = { ...offsets };
    const files: Partial<Record<"stdout" | "stderr", Deno.FsFile>> = {};
    const buffer = new Uint8Array(OUTPUT_CHUNK);
    try {
      for (;;) {
        let sent = false;
        for (const name of ["stdout", "stderr"] as const) {
          const spool = job[name];
          if (at[name] >= spool.stored || out.gone) continue;
          let file = files[name];
          if (file === undefined) {
            file = files[name] = await Deno.open(spool.path, { read: true });
            await file.seek(at[name], Deno.SeekMode.Start);
          }
          // Reads go on from where the last one ended: no seek per message.
          const n = await file.read(
            buffer.subarray(0, Math.min(OUTPUT_CHUNK, spool.stored - at[name])),
          );
          if (n === null || n === 0) continue;
          at[name] += n;
          await out.write({
            [name]: buffer.slice(0, n),
            stdoutOffset: at.stdout,
            stderrOffset: at.stderr,
          });
          sent = true;
        }
        if (out.gone) return;
        if (sent) continue;
        if (job.outputEnded) {
          if (job.record.truncated) {
            await out.write({ stdoutOffset: at.stdout, stderrOffset: at.stderr, truncated: true });
          }
          return;
        }
        await Promise.race([job.changed(), out.left]);
      }
    } finally {
      files.stdout?.close();
      files.stderr?.close();
      this.#trim();
    }
  }

  /**
   * After a stream: the C heap's free memory back to the kernel (at most once a second). The
   * runtime's HTTP/2 layer copies every message a few times, and what it freed would otherwise
   * stay resident.
   */
  #trim(): void {
    const now = performance.now();
    if (now - this.#trimmedAtMs < TRIM_EVERY_MS) return;
    this.#trimmedAtMs = now;
    trimHeap();
  }

  /**
   * Cancel: TERM to the job's process group, KILL after the grace; returns once no process of
   * the group is left (a job whose own process ended already keeps its status, and what it
   * left in its group is stopped all the same).
   */
  async cancel(id: string, graceMs: number): Promise<JobMessage> {
    const job = this.#find(id);
    await job.spawned.promise;
    if (graceMs > MAX_CANCEL_GRACE_MS) {
      throw new JobsError("INVALID_ARGUMENT", `grace_ms ${graceMs} is more than 24 hours`);
    }
    if (job.groupGone === null) {
      job.groupGone = Promise.withResolvers<void>();
      const grace = graceMs === 0 ? DEFAULT_CANCEL_GRACE_MS : graceMs;
      job.record.cancel = { atMs: Date.now(), graceMs: grace };
      job.save();
      const alive = new Promise<boolean>((resolve) => {
        const waiters = this.#signalled.get(job.seq) ?? [];
        waiters.push(resolve);
        this.#signalled.set(job.seq, waiters);
      });
      this.#send({ type: "signal", seq: job.seq, signo: SIGTERM });
      this.#send({ type: "watch-group", seq: job.seq });
      // CANCELLED only if the TERM found the job's own process alive: one that ended on its
      // own a moment before keeps its own status.
      if (await alive) this.#cancelled.add(job.seq);
      this.#killAfter(job, grace);
    }
    await job.groupGone.promise;
    // The group can empty a moment before the leader's status arrives: wait for it too.
    while (!job.finished) await job.changed();
    return jobMessage(job);
  }

  #killAfter(job: Job, ms: number): void {
    const timer = setTimeout(() => {
      this.#send({ type: "signal", seq: job.seq, signo: SIGKILL });
    }, Math.max(0, ms));
    void job.groupGone?.promise.then(() => clearTimeout(timer));
  }

  /** List: the jobs kept, oldest first, a page at a time (`ids`: those jobs only). */
  list(request: ListFields): { jobs: JobMessage[]; nextAfterId: string } {
    const wanted = new Set(request.ids);
    let jobs = this.#table.list().filter((job) => wanted.size === 0 || wanted.has(job.id));
    if (request.afterId !== "") {
      const after = this.#table.get(request.afterId);
      jobs = after === undefined ? [] : jobs.filter((job) => job.seq > after.seq);
    }
    const limit = Math.min(request.limit === 0 ? LIST_PAGE_JOBS : request.limit, LIST_PAGE_JOBS);
    const page: JobMessage[] = [];
    let bytes = 0;
    for (const job of jobs) {
      if (page.length >= limit || (page.length > 0 && bytes >= LIST_PAGE_BYTES)) break;
      page.push(jobMessage(job));
      bytes += job.record.argv.reduce((sum, arg) => sum + arg.length, 128);
    }
    const more = page.length < jobs.length;
    return { jobs: page, nextAfterId: more ? page.at(-1)?.id ?? "" : "" };
  }
}

/** Records of a run, for the restarted service's first look (exported for tests). */
export type { JobRecord };
