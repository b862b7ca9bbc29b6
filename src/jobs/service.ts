/**
 * The five calls of `denit.jobs.v1.Jobs`. Each job runs under its own keeper (launch/keep.c),
 * which records in the spool what becomes of it; a watch on the run's directory tells the service.
 */

import { errorLine, orElse } from "../common/errors.ts";
import { describeProcess } from "../common/proc.ts";
import { SIGKILL, signalName, signalNumber, SIGTERM } from "../common/signals.ts";
import { Errno, errnoMessage, sendSignal, spawnAndRead } from "../sys/process.ts";
import { replaceFile } from "../sys/spool.ts";
import { Job, JOB_OUTPUT_CAP, JobTable } from "./store.ts";
import * as contract from "./contract.ts";

const MAX_CANCEL_GRACE_MS = 24 * 60 * 60 * 1000;
/** How often the jobs not yet done are read again, whatever the directory's events said. */
const SWEEP_MS = 1000;
/** A job's argv and env together, as UTF-8 bytes (the kernel's own limit is about 2 MiB). */
export const MAX_RUN_BYTES = 128 * 1024;
/** A job's argv and env entries together (each costs a few hundred bytes, whatever its length). */
const MAX_RUN_ENTRIES = 4096;
/** The largest request the service decodes: a Run at both caps, with room for its framing. */
export const MAX_REQUEST_BYTES = 2 * MAX_RUN_BYTES;
const MAX_RUNNING_JOBS = 256;
/** Follow and FollowIO streams open at once, over every connection. */
const MAX_STREAMS = 128;
/** List's largest page: at most this many jobs, and about this many bytes of them. */
const LIST_PAGE_JOBS = 1000;
const LIST_PAGE_BYTES = 1024 * 1024;
/** FollowIO's largest message. */
const OUTPUT_CHUNK = 256 * 1024;
/** How often Cancel looks whether the job's process group is empty (the kernel tells no one). */
const GROUP_POLL_MS = 20;
const CANCEL = signalNumber(contract.CANCEL_SIGNAL);
const SIGCONT = signalNumber("SIGCONT");

const ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;
const ENV_KEY_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
const encoder = new TextEncoder();

type Refusal = "INVALID_ARGUMENT" | "NOT_FOUND" | "UNAVAILABLE" | "RESOURCE_EXHAUSTED";

/** A request the service refuses: the gRPC status name and a one-line reason. */
export class JobsError extends Error {
  override name = "JobsError";
  constructor(readonly code: Refusal, message: string) {
    super(message);
  }
}

function invalid(message: string): JobsError {
  return new JobsError("INVALID_ARGUMENT", message);
}

/** A job as the contract's Job message carries it. */
export type JobMessage = ReturnType<typeof jobMessage>;

export interface OutputMessage {
  stdout?: Uint8Array;
  stderr?: Uint8Array;
  stdoutOffset: number;
  stderrOffset: number;
  truncated?: boolean;
}

/** A server stream: `write` resolves once the transport took it; `left` once the client left. */
export interface Outlet<T> {
  write(message: T): Promise<void>;
  readonly gone: boolean;
  readonly left: Promise<void>;
}

export interface RunFields {
  id: string;
  argv: readonly string[];
  workDir: string;
  env: Readonly<Record<string, string>>;
}

export interface ListFields {
  afterId: string;
  limit: number;
  ids: readonly string[];
}

function jobMessage(job: Job) {
  const { record: r, state: s, end } = job;
  return {
    id: r.id,
    status: job.status,
    argv: r.argv,
    pid: job.pid,
    exitCode: end === null || end.exit < 0 ? 0 : end.exit,
    signal: end === null || end.signal === 0 ? "" : signalName(end.signal),
    startedAtMs: r.startedAtMs,
    finishedAtMs: end?.atMs ?? 0,
    stdoutBytes: job.stdoutBytes,
    stderrBytes: job.stderrBytes,
    outputTruncated: s !== null && (s.truncated === 1 || s.lost > 0),
    cause: s?.oom === 1 ? "oom" : "", // "oom": the kernel's OOM killer ended it
  };
}

/** True while a process (or -pgid: a group member) exists, zombies included: kill(2), signal 0. */
function exists(pid: number): boolean {
  const result = sendSignal(pid, 0);
  return result.ok || result.errno !== Errno.ESRCH;
}

/**
 * Adds to `known` (pid → start time) the job's group (`members`, at first only) and what a known
 * process started (`setsid` ones too); false without /proc.
 */
function findJobProcesses(pgid: number, known: Map<number, string>, members: boolean): boolean {
  const facts = new Map<number, ReturnType<typeof describeProcess>>();
  try {
    for (const entry of Deno.readDirSync("/proc")) {
      const info = /^\d+$/.test(entry.name) ? describeProcess(Number(entry.name)) : null;
      if (info !== null && info.state !== "Z" && info.state !== "?") facts.set(info.pid, info);
    }
  } catch {
    return false;
  }
  if (members) { for (const [pid, f] of facts) if (f.pgid === pgid) known.set(pid, f.startTime); }
  for (let added = true; added;) {
    added = false;
    for (const [pid, f] of facts) {
      const parentStart = known.get(f.ppid);
      if (parentStart === undefined || parentStart !== facts.get(f.ppid)?.startTime) continue;
      if (known.has(pid)) continue;
      known.set(pid, f.startTime);
      added = true;
    }
  }
  return true;
}

/** A Cancel for a job whose keeper is gone: TERM and CONT now, KILL after the grace; until gone. */
async function stopJob(pgid: number, graceMs: number): Promise<void> {
  const known = new Map<number, string>();
  // Signal 0 asks only whether anything is left.
  const signal = (signo: number, members = false) => {
    if (!findJobProcesses(pgid, known, members)) return sendSignal(-pgid, signo).ok;
    for (const [pid, start] of known) {
      // The same process (pid and start time), alive: a zombie or one gone is done with.
      const now = describeProcess(pid);
      if (now.startTime === start && !"Z?".includes(now.state)) sendSignal(pid, signo);
      else known.delete(pid);
    }
    return known.size > 0;
  };
  const killAt = performance.now() + graceMs;
  signal(SIGTERM, true);
  for (let left = signal(SIGCONT); left;) {
    await new Promise((resolve) => setTimeout(resolve, GROUP_POLL_MS));
    left = signal(performance.now() >= killAt ? SIGKILL : 0);
  }
}

/** What each keeper is started with. */
export interface KeeperSettings {
  /** The executable whose `job keep` keeps a job (denit's launcher). */
  readonly keeper: string;
  /** The memory cgroup's file with its `oom_kill` count, which keepers read; null if none. */
  readonly oomCount: string | null;
  /** The container's open-file soft limit, a job's as the main child's (null: unknown). */
  readonly fileLimit: number | null;
}

export class JobService {
  readonly #table: JobTable;
  readonly #dir: string;
  readonly #settings: KeeperSettings;
  #seq: number;
  #stopping = false;
  /** The jobs (by group) this service is stopping itself, their keepers gone: until they end. */
  readonly #takenOver = new Map<number, Promise<void>>();
  #streams = 0;

  /** The table of the run in `dir`, with every job an earlier service of this run left there. */
  constructor(dir: string, settings: KeeperSettings) {
    this.#dir = dir;
    this.#settings = settings;
    this.#table = new JobTable(dir);
    this.#seq = this.#table.lastSeq();
    for (const job of this.#table.list()) {
      if (job.state === null && !job.finished) {
        this.#lost(job, "the job service restarted before it ran");
      }
    }
    this.#table.saveCounts();
  }

  /** Follows the run's directory; every SWEEP_MS the jobs not done are read again (lost events). */
  async watch(): Promise<void> {
    const sweep = setInterval(() => {
      this.#refresh(this.#table.list());
      this.#settleLost();
    }, SWEEP_MS);
    try {
      for await (const event of Deno.watchFs(this.#dir, { recursive: false })) {
        // A keeper swaps N.state and N.state.new: either name says the state changed.
        const jobs = event.paths.map((path) => /\/(\d+)\.(state|state\.new|out|err)$/.exec(path))
          .map((match) => match === null ? undefined : this.#table.bySeq(Number(match[1])));
        this.#refresh(jobs);
      }
    } finally {
      clearInterval(sweep);
    }
  }

  /** Reads the files of the jobs not yet done again; saves the counts if a status changed. */
  #refresh(jobs: ReadonlyArray<Job | undefined>): void {
    let changed = false;
    for (const job of jobs) {
      if (job === undefined || (job.finished && job.outputEnded)) continue;
      const was = job.status;
      job.refresh();
      if (job.status !== was) changed = true;
      if (job.finished && job.outputEnded) this.#table.trim();
    }
    if (changed) this.#table.saveCounts();
  }

  /** A job whose keeper and group are gone with no end recorded is lost, not RUNNING for ever. */
  #settleLost(): void {
    for (const job of this.#table.list()) {
      const state = job.state;
      if (state === null || job.finished || this.#keeperOf(job) !== 0 || exists(-state.pid)) {
        continue;
      }
      job.refresh();
      if (!job.finished) this.#lost(job, "its keeper died before it recorded the job's end");
    }
  }

  /** Records that the keeper left no end; a job that never ran gets the reason as its stderr. */
  #lost(job: Job, reason: string): void {
    try {
      if (job.state === null) replaceFile(job.path("err"), encoder.encode(`denit: ${reason}\n`));
      job.record.lost = { atMs: Date.now(), reason };
      job.save();
    } catch {
      delete job.record.lost; // the disk took it not: the next sweep tries again
      return;
    }
    job.refresh();
    job.notify();
    this.#table.saveCounts();
  }

  /** Run: a new job, or the one that has this id already. */
  async run({ id, argv, workDir, env: variables }: RunFields): Promise<JobMessage> {
    const use = "use 1 to 128 letters, digits, '.', '_', ':' or '-'";
    if (!ID_PATTERN.test(id)) throw invalid(`invalid id "${id.slice(0, 140)}": ${use}`);
    const existing = this.#table.get(id);
    if (existing !== undefined) {
      await existing.started.promise;
      return jobMessage(existing);
    }
    if (this.#stopping || this.#stopMarked()) {
      throw new JobsError("UNAVAILABLE", "denit is stopping: no new jobs");
    }
    if (argv.length === 0 || argv[0] === "") throw invalid("argv is empty: name a program");
    if (argv.some((arg) => arg.includes("\0"))) throw invalid("argv holds a NUL byte");
    const env: string[] = [];
    const { source } = ENV_KEY_PATTERN;
    for (const [key, value] of Object.entries(variables)) {
      if (!ENV_KEY_PATTERN.test(key)) {
        throw invalid(`invalid env key "${key.slice(0, 140)}": must match ${source}`);
      }
      if (value.includes("\0")) throw invalid(`env ${key} holds a NUL byte`);
      env.push(`${key}=${value}`);
    }
    const entries = argv.length + env.length;
    if (entries > MAX_RUN_ENTRIES) {
      throw invalid(`argv and env hold ${entries} entries: at most ${MAX_RUN_ENTRIES} a job`);
    }
    const bytes = [...argv, ...env].reduce((sum, s) => sum + encoder.encode(s).length + 1, 0);
    if (bytes > MAX_RUN_BYTES) {
      throw invalid(`argv and env hold ${bytes} bytes: at most ${MAX_RUN_BYTES} (128 KiB) a job`);
    }
    if (this.#table.counts().running >= MAX_RUNNING_JOBS) {
      throw new JobsError("RESOURCE_EXHAUSTED", `${MAX_RUNNING_JOBS} jobs run already`);
    }
    // Relative: to denit's working directory, not the client's (refused, as docker exec -w does).
    if (workDir !== "" && !workDir.startsWith("/")) {
      throw invalid(`work_dir "${workDir}" is not an absolute path`);
    }
    // Missing or unreadable: refused.
    const isDirectory = workDir === "" || orElse(() => Deno.statSync(workDir).isDirectory, false);
    if (!isDirectory) throw invalid(`work_dir "${workDir}" is not a directory`);
    let job: Job;
    try {
      job = Job.create(this.#dir, id, ++this.#seq, Object.freeze([...argv]));
    } catch (err: unknown) {
      throw new JobsError("UNAVAILABLE", `cannot keep the job in the spool: ${errorLine(err)}`);
    }
    this.#table.add(job);
    this.#keep(job, workDir === "" ? null : workDir, env);
    this.#table.saveCounts();
    return jobMessage(job);
  }

  /** denit marked its stop in the run's directory: new jobs are refused from then on. */
  #stopMarked(): boolean {
    const marker = `${this.#dir}/${contract.STOPPING_FILE}`;
    return this.#stopping = orElse(() => !!Deno.lstatSync(marker), false);
  }

  /** Starts the job's keeper and waits until it says the job runs. */
  #keep(job: Job, workDir: string | null, env: readonly string[]): void {
    const { keeper, ...options } = this.#settings;
    const how = { ...options, dir: this.#dir, seq: job.seq, cap: JOB_OUTPUT_CAP, workDir, env };
    const argv = contract.keeperArgv(keeper, how, job.record.argv);
    // This process's environment, byte for byte (Deno.Command would drop entries without '=').
    const said = spawnAndRead({
      path: encoder.encode(keeper),
      argv: argv.map((word) => encoder.encode(word)),
    });
    if (typeof said === "number") {
      this.#table.drop(job);
      throw new JobsError("RESOURCE_EXHAUSTED", `cannot start the job: ${errnoMessage(-said)}`);
    }
    if (!contract.KEEPER_STARTED.test(said)) {
      return this.#lost(job, "its keeper could not start it (see denit's log)");
    }
    job.refresh();
  }

  #find(id: string): Job {
    const job = this.#table.get(id);
    if (job === undefined) throw new JobsError("NOT_FOUND", `no job "${id.slice(0, 140)}"`);
    return job;
  }

  /** A stream's place among MAX_STREAMS for `work` on the job `id`, given back when it ends. */
  async #stream(id: string, work: (job: Job) => Promise<void>): Promise<void> {
    const job = this.#find(id);
    if (this.#streams >= MAX_STREAMS) {
      throw new JobsError("RESOURCE_EXHAUSTED", `${MAX_STREAMS} streams are open already`);
    }
    this.#streams++;
    try {
      await work(job);
    } finally {
      this.#streams--;
    }
  }

  /** Follow: the job now, then at every change of status, until it has finished. */
  follow(id: string, out: Outlet<JobMessage>): Promise<void> {
    return this.#stream(id, async (job) => {
      await job.started.promise;
      for (let last = "";;) {
        const message = jobMessage(job);
        const key = `${message.status}/${message.pid}`;
        if (key !== last) await out.write(message);
        last = key;
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
    return this.#stream(id, async (job) => {
      const at = { ...offsets };
      const files: Partial<Record<"stdout" | "stderr", Deno.FsFile>> = {};
      const buffer = new Uint8Array(OUTPUT_CHUNK);
      const reached = () => ({ stdoutOffset: at.stdout, stderrOffset: at.stderr });
      try {
        for (;;) {
          let sent = false;
          for (const name of ["stdout", "stderr"] as const) {
            const stored = name === "stdout" ? job.stdoutBytes : job.stderrBytes;
            if (at[name] >= stored || out.gone) continue;
            let file = files[name];
            if (file === undefined) {
              file = files[name] = await Deno.open(job.path(name.slice(3)), { read: true });
              await file.seek(at[name], Deno.SeekMode.Start);
            }
            // Reads go on from where the last one ended: no seek per message.
            const wanted = Math.min(OUTPUT_CHUNK, stored - at[name]);
            const n = await file.read(buffer.subarray(0, wanted));
            if (n === null || n === 0) continue;
            at[name] += n;
            await out.write({ [name]: buffer.slice(0, n), ...reached() });
            sent = true;
          }
          if (out.gone) return;
          if (sent) continue;
          if (job.outputEnded) {
            if (jobMessage(job).outputTruncated) await out.write({ ...reached(), truncated: true });
            return;
          }
          await Promise.race([job.changed(), out.left]);
        }
      } finally {
        files.stdout?.close();
        files.stderr?.close();
      }
    });
  }

  /** Cancel: TERM, KILL after the grace (by the keeper, or this service); returns once all gone. */
  async cancel(id: string, graceMs: number): Promise<JobMessage> {
    const job = this.#find(id);
    await job.started.promise;
    if (graceMs > MAX_CANCEL_GRACE_MS) throw invalid(`grace_ms ${graceMs} is more than 24 hours`);
    const pgid = job.pid;
    const keeper = this.#keeperOf(job);
    if (job.record.cancel === null && pgid > 0 && (exists(-pgid) || keeper !== 0)) {
      const grace = graceMs === 0 ? contract.DEFAULT_CANCEL_GRACE_MS : graceMs;
      // CANCELLED only if the job's own process (a zombie counts) is alive as its keeper is asked.
      const alive = sendSignal(pgid, 0).ok;
      // The keeper is told before the record says so: a service killed in between loses nothing.
      replaceFile(job.path("cancel"), encoder.encode(String(grace)));
      if (keeper !== 0) sendSignal(keeper, CANCEL);
      job.record.cancel = { atMs: Date.now(), graceMs: grace, alive };
      job.save();
    }
    const cancel = job.record.cancel;
    while (pgid > 0 && (exists(-pgid) || this.#keeperOf(job) !== 0)) {
      // No keeper: this service ends the job in what is left of the grace, once for all waiters.
      if (cancel !== null && this.#keeperOf(job) === 0) {
        const left = Math.max(0, cancel.atMs + cancel.graceMs - Date.now());
        const stopping = this.#takenOver.get(pgid) ??
          stopJob(pgid, left).finally(() => this.#takenOver.delete(pgid));
        this.#takenOver.set(pgid, stopping);
        await stopping;
      }
      await new Promise((resolve) => setTimeout(resolve, GROUP_POLL_MS));
    }
    while (!job.finished) await job.changed();
    return jobMessage(job);
  }

  /** The pid of the job's keeper while it lives (its pid and start time), else 0. */
  #keeperOf(job: Job): number {
    const state = job.state;
    return state !== null && contract.keeperLives(state) ? state.keeper : 0;
  }

  /** List: the jobs kept, oldest first, a page at a time (`ids`: those jobs only). */
  list(request: ListFields): { jobs: JobMessage[]; nextAfterId: string } {
    const wanted = new Set(request.ids);
    let jobs = this.#table.list().filter((job) => wanted.size === 0 || wanted.has(job.id));
    if (request.afterId !== "") {
      const after = this.#table.get(request.afterId);
      jobs = after === undefined ? [] : jobs.filter((job) => job.seq > after.seq);
    }
    const limit = Math.min(request.limit || LIST_PAGE_JOBS, LIST_PAGE_JOBS);
    const page: JobMessage[] = [];
    let bytes = 0;
    for (const job of jobs.slice(0, limit)) {
      if (page.length > 0 && bytes >= LIST_PAGE_BYTES) break;
      page.push(jobMessage(job));
      bytes += job.record.argv.reduce((sum, arg) => sum + arg.length, 128);
    }
    const more = page.length < jobs.length;
    return { jobs: page, nextAfterId: more ? page.at(-1)?.id ?? "" : "" };
  }
}
