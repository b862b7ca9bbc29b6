/**
 * The five calls of `denit.jobs.v1.Jobs` over the job table: what each checks, what it waits
 * for, and what it answers. The supervisor (through `JobHostPort`) starts, signals and reaps;
 * the pump fills the spools; this module only reads them.
 */

import type { FromJobHost, JobCounts, ToJobHost } from "../common/jobs.ts";
import { closeFd, openPipe, pipeErrnoMessage, trimHeap } from "../sys/pipes.ts";
import type { Pump } from "./pump.ts";
import { Job, JobTable, type Spool } from "./store.ts";

/** Cancel's default time between TERM and KILL. */
export const DEFAULT_CANCEL_GRACE_MS = 10_000;
/** The most Cancel may be asked to wait between TERM and KILL. */
export const MAX_CANCEL_GRACE_MS = 24 * 60 * 60 * 1000;
/** FollowIO's largest message. */
const OUTPUT_CHUNK = 256 * 1024;
/** The heap is trimmed after a stream at most this often. */
const TRIM_EVERY_MS = 1000;

const SIGTERM = 15;
const SIGKILL = 9;
const ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
const ENV_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** A request the service refuses: the gRPC status name and a one-line reason. */
export class JobsError extends Error {
  override name = "JobsError";
  constructor(readonly code: "INVALID_ARGUMENT" | "NOT_FOUND" | "UNAVAILABLE", message: string) {
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
  return {
    id: job.id,
    status: job.status,
    argv: job.argv,
    pid: job.pid,
    exitCode: job.exitCode,
    signal: job.signal,
    startedAtMs: job.startedAtMs,
    finishedAtMs: job.finishedAtMs,
    stdoutBytes: job.stdout.stored,
    stderrBytes: job.stderr.stored,
    outputTruncated: job.truncated,
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

/** The job service's state on its thread. */
export class JobService {
  readonly #table = new JobTable();
  readonly #pump: Pump;
  readonly #spool: string;
  readonly #send: (message: ToJobHost) => void;
  readonly #bySeq = new Map<number, Job>();
  #seq = 0;
  #trimmedAtMs = 0;

  constructor(pump: Pump, spool: string, send: (message: ToJobHost) => void) {
    this.#pump = pump;
    this.#spool = spool;
    this.#send = send;
  }

  /** A message from the supervisor about a job. */
  fromHost(message: FromJobHost): void {
    if (message.type === "start") return;
    const job = this.#bySeq.get(message.seq);
    if (job === undefined) return;
    switch (message.type) {
      case "spawned":
        job.pid = message.pid;
        job.spawned.resolve();
        break;
      case "not-started": {
        // As a shell would: the reason on the job's stderr, and 126 or 127 as its exit code.
        const line = new TextEncoder().encode(`denit: ${message.message}\n`);
        job.store(job.stderr, line, line.length);
        job.finish(message.exitCode, null);
        job.spawned.resolve();
        this.#ended(job);
        break;
      }
      case "exited":
        job.finish(message.code, message.signal);
        // Cancel waits for the group as well; otherwise the supervisor is done with the job.
        if (job.groupGone === null) this.#bySeq.delete(job.seq);
        this.#ended(job);
        break;
      case "group-gone":
        job.groupGone?.resolve();
        if (job.finished) this.#bySeq.delete(job.seq);
        break;
    }
  }

  #ended(job: Job): void {
    this.#table.finished(job);
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
    if (argv.length === 0 || argv[0] === "") {
      throw new JobsError("INVALID_ARGUMENT", "argv is empty: name the program to run");
    }
    if (argv.some(hasNul)) throw new JobsError("INVALID_ARGUMENT", "argv holds a NUL byte");
    const env = { ...Deno.env.toObject() };
    for (const [key, value] of Object.entries(fields.env)) {
      if (!ENV_KEY_PATTERN.test(key)) {
        throw new JobsError(
          "INVALID_ARGUMENT",
          `invalid env key "${key.slice(0, 140)}": must match ^[A-Za-z_][A-Za-z0-9_]*$`,
        );
      }
      if (hasNul(value)) throw new JobsError("INVALID_ARGUMENT", `env ${key} holds a NUL byte`);
      env[key] = value;
    }
    const workDir = fields.workDir === "" ? null : fields.workDir;
    if (workDir !== null) this.#checkDirectory(workDir);
    const pipes = this.#pipes();
    let job: Job;
    try {
      job = new Job(id, ++this.#seq, Object.freeze([...argv]), this.#spool);
    } catch (err: unknown) {
      for (const fd of pipes) closeFd(fd);
      throw new JobsError("UNAVAILABLE", `cannot spool output: ${String(err)}`);
    }
    this.#table.add(job);
    this.#bySeq.set(job.seq, job);
    const [outRead, outWrite, errRead, errWrite] = pipes;
    this.#connect(job, job.stdout, outRead);
    this.#connect(job, job.stderr, errRead);
    this.#send({
      type: "run",
      seq: job.seq,
      argv,
      workDir,
      env: Object.entries(env).map(([key, value]) => `${key}=${value}`),
      stdout: outWrite,
      stderr: errWrite,
    });
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

  /** Two pipes (stdout's read and write ends, then stderr's), or UNAVAILABLE. */
  #pipes(): [number, number, number, number] {
    const out = openPipe();
    const err = openPipe();
    if (typeof out !== "number" && typeof err !== "number") {
      return [out.read, out.write, err.read, err.write];
    }
    for (const pipe of [out, err]) {
      if (typeof pipe !== "number") [pipe.read, pipe.write].forEach(closeFd);
    }
    const errno = typeof out === "number" ? -out : typeof err === "number" ? -err : 0;
    throw new JobsError("UNAVAILABLE", `cannot make a pipe: ${pipeErrnoMessage(errno)}`);
  }

  /** The pump copies this pipe into the spool. */
  #connect(job: Job, spool: Spool, fd: number): void {
    this.#pump.add(fd, {
      data: (buffer, length) => job.store(spool, buffer, length),
      end: () => {
        spool.end();
        job.notify();
        if (job.finished && job.outputEnded) this.#table.trim();
      },
    });
  }

  #find(id: string): Job {
    const job = this.#table.get(id);
    if (job === undefined) throw new JobsError("NOT_FOUND", `no job "${id.slice(0, 140)}"`);
    return job;
  }

  /** Follow: the job now, then at every change of status, until it has finished. */
  async follow(id: string, out: Outlet<JobMessage>): Promise<void> {
    const job = this.#find(id);
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
  }

  /** FollowIO: both streams from the offsets given, stored bytes first, until output ends. */
  async followIO(
    id: string,
    offsets: { stdout: number; stderr: number },
    out: Outlet<OutputMessage>,
  ): Promise<void> {
    const job = this.#find(id);
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
          const bytes = buffer.slice(0, n);
          await out.write({
            [name]: bytes,
            stdoutOffset: at.stdout,
            stderrOffset: at.stderr,
          });
          sent = true;
        }
        if (out.gone) return;
        if (sent) continue;
        if (job.outputEnded) {
          if (job.truncated) {
            await out.write({
              stdoutOffset: at.stdout,
              stderrOffset: at.stderr,
              truncated: true,
            });
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
    const now = Date.now();
    if (now - this.#trimmedAtMs < TRIM_EVERY_MS) return;
    this.#trimmedAtMs = now;
    trimHeap();
  }

  /** Cancel: TERM to the job's group, KILL after the grace; returns once the group is empty. */
  async cancel(id: string, graceMs: number): Promise<JobMessage> {
    const job = this.#find(id);
    await job.spawned.promise;
    if (job.finished && job.groupGone === null) return jobMessage(job);
    if (graceMs > MAX_CANCEL_GRACE_MS) {
      throw new JobsError("INVALID_ARGUMENT", `grace_ms ${graceMs} is more than 24 hours`);
    }
    if (job.groupGone === null) {
      job.groupGone = Promise.withResolvers<void>();
      job.cancelRequested = true;
      this.#send({ type: "signal", seq: job.seq, signo: SIGTERM });
      this.#send({ type: "watch-group", seq: job.seq });
      const grace = graceMs === 0 ? DEFAULT_CANCEL_GRACE_MS : graceMs;
      const timer = setTimeout(() => {
        this.#send({ type: "signal", seq: job.seq, signo: SIGKILL });
      }, grace);
      void job.groupGone.promise.then(() => clearTimeout(timer));
    }
    await job.groupGone.promise;
    // The group can empty a moment before the leader's status arrives: wait for it too.
    while (!job.finished) await job.changed();
    return jobMessage(job);
  }

  /** List: every job kept, oldest first. */
  list(): JobMessage[] {
    return this.#table.list().map(jobMessage);
  }
}
