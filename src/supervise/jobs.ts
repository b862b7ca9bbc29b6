/**
 * The supervisor's side of the job service (`--jobs-socket`). The service, gRPC and all, is a
 * process of its own (`denit job serve`: this executable again, in its own process group). denit
 * holds the socket itself, listening from its start to its end, and starts the service when the
 * first connection waits (a service nobody uses costs nothing); when the service dies, denit
 * starts it again after a backoff while it holds jobs, else at the next connection (meanwhile
 * connections wait in the socket's backlog, none refused). It never forwards the main child's
 * signals to it, and stops it at the end. What only denit may do stays here: it spawns the jobs
 * (so each is denit's child, and its exit status can never be lost, even while the service is
 * down), signals their process groups and reaps them with the one reaper. It keeps a read end of
 * every job's output pipes until the service says the output ended: while the service is down a
 * job's writes wait in the pipe (never SIGPIPE), and a restarted service gets the pipes back.
 * Nothing here loads gRPC, protobuf or Node's compatibility layer.
 */

import {
  CONTROL_FD,
  type FromJobHost,
  type JobCounts,
  type JobEnd,
  LISTEN_FD,
  type ToJobHost,
} from "../common/jobs.ts";
import type { Logger } from "../common/log.ts";
import { dirname } from "../common/paths.ts";
import { SIGKILL, signalName, SIGTERM } from "../common/signals.ts";
import { Channel, channelPair } from "../sys/channel.ts";
import { UnixListener } from "../sys/listener.ts";
import { prepareSocketPath, prepareTrustedDirectory } from "../common/job_paths.ts";
import {
  closeFd,
  destroyFileActions,
  jobFileActions,
  openPipe,
  serviceFileActions,
} from "../sys/pipes.ts";
import {
  environEntries,
  Errno,
  type ExitStatus,
  hasTerminated,
  pathExists,
  sendSignal,
  spawnAsync,
  type SpawnResult,
} from "../sys/process.ts";
import {
  ExecError,
  execFailure,
  type Executable,
  resolveCommand,
  shellFallback,
} from "./command.ts";
import { findMemoryCgroup, readOomKills } from "./cgroup.ts";

/** The service starts again no sooner than this, doubled at each death up to RESTART_MAX_MS. */
const RESTART_FIRST_MS = 100;
const RESTART_MAX_MS = 5000;
/** A service that ran this long before it died is started again at once (the backoff resets). */
const RESTART_RESET_AFTER_MS = 10_000;
/** Pids reaped while a job's spawn was under way, kept until the spawn says whose they are. */
const UNCLAIMED_LIMIT = 1024;
/** SIGUSR1 (10): the job service's runtime (`deno run` 2.9.2+) would open an inspector on it. */
const SIGUSR1 = 10;

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** Where and how the service runs. */
export interface JobsSettings {
  readonly socket: string;
  readonly spool: string;
  readonly log: Logger;
  /** The service's log lines: the same level and format as denit's. */
  readonly logArgs: readonly string[];
  readonly onCounts: (counts: JobCounts) => void;
  /** The service was killed by the OOM killer. */
  readonly onOomKill: () => void;
}

interface HeldJob {
  readonly seq: number;
  readonly pid: number;
  /** The read ends of its stdout and stderr pipes, until the service says the output ended. */
  pipes: number[];
  /** Its end, once reaped: kept until the service recorded it. */
  end: JobEnd | null;
  /** No process of its group is left (checked after the leader's end). */
  groupGone: boolean;
  /** Cancel waits for the group to be empty. */
  watched: boolean;
  /** The service recorded the job's end in its spool. */
  recorded: boolean;
}

/**
 * The service's V8 heap limit in the `deno run` form: under connection churn its heap would
 * otherwise grow to about 180 MiB before V8 collects (measured, Deno 2.9.6); with this limit it
 * stays near 90 MiB of private memory.
 */
const SERVICE_HEAP = "--v8-flags=--max-old-space-size=64";

/**
 * The service is the OOM killer's first pick in its container (oom_score_adj 1000: raising a
 * value needs no privilege), as soon as its spawn answers, while its runtime is still loading:
 * its death loses nothing (denit holds the jobs and starts it again), whereas denit's ends the
 * container.
 */
function preferAsOomVictim(pid: number): void {
  try {
    Deno.writeTextFileSync(`/proc/${pid}/oom_score_adj`, "1000");
  } catch {
    // A read-only /proc, or the service already gone: the kernel's default choice stands.
  }
}

/** How the service's runtime runs the bundle (the launcher's flags, launch/denit.c). */
const RUN_FLAGS = ["run", "--quiet", "--no-config", "--no-lock", "--allow-all", "--no-prompt"];

/** The command that starts the service: the runtime on denit's bundle, `job serve`. */
export function serviceCommand(): string[] {
  const main = new URL(Deno.mainModule).pathname;
  return [Deno.execPath(), ...RUN_FLAGS, SERVICE_HEAP, main, "job", "serve"];
}

/**
 * The service's code that is not there, or null: a bundle beside denit's own, which a copy of
 * dist/denit.js alone lacks. Checked at denit's start: the service starts at the first
 * connection.
 */
function missingServiceCode(): string | null {
  const bundle = `${dirname(new URL(Deno.mainModule).pathname)}/denit-jobs.js`;
  return pathExists(bundle) ? null : bundle;
}

/** The environment of the service's runtime: nothing of the container's steers it. */
const SERVICE_ENVIRONMENT = [
  "DENO_DIR=/dev/null/denit-no-cache",
  "DENO_DISABLE_NODE_SHIM=1",
  "DENO_NO_UPDATE_CHECK=1",
];

/** Runs the job service's process and the jobs it asks for. */
export class JobHost {
  readonly #settings: JobsSettings;
  readonly #jobs = new Map<number, HeldJob>();
  readonly #byPid = new Map<number, HeldJob>();
  readonly #unclaimed = new Map<number, ExitStatus>();
  #spawning = 0;
  /** Resolved (and renewed) whenever a spawn finishes. */
  #spawned = Promise.withResolvers<void>();
  #channel: Channel | null = null;
  #servicePid = 0;
  #serviceStartedAtMs = 0;
  /** The memory cgroup, whose OOM-kill count tells whether the service died of it. */
  readonly #memory = findMemoryCgroup();
  #oomKillsAtStart: number | null = null;
  #restartDelayMs = RESTART_FIRST_MS;
  /** The job socket, held from start() to close(). */
  #listener: UnixListener | null = null;
  /** Resolves when the running service ended, with how long to wait before the next start. */
  #ended: PromiseWithResolvers<number> | null = null;
  /** A service has said it listens: the next one to say so is a restart. */
  #listenedOnce = false;
  /** denit is stopping: no new jobs, and the service is not started again. */
  #stopping = false;
  #closed = false;

  constructor(settings: JobsSettings) {
    this.#settings = settings;
  }

  /** The service's pid (0 while it is down): never signalled with the main child. */
  get servicePid(): number {
    return this.#servicePid;
  }

  /**
   * Makes the socket's directory and the spool, binds the socket and listens (a bad path fails
   * here, before the child runs); the service's process starts when the first connection waits.
   */
  async start(): Promise<void> {
    const { socket, spool } = this.#settings;
    await prepareSocketPath(socket);
    prepareTrustedDirectory(spool, "job spool:");
    const missing = missingServiceCode();
    if (missing !== null) throw new Error(`the job service's code is missing: ${missing}`);
    this.#listener = UnixListener.bind(socket);
    void this.#keepServing(this.#listener);
  }

  /**
   * The service's life: started when a connection waits, or at once while denit holds jobs
   * (their output and their ends need it); after its death, no sooner than the backoff says.
   */
  async #keepServing(listener: UnixListener): Promise<void> {
    while (!this.#closed) {
      const needed = this.#jobs.size > 0 && !this.#stopping;
      if (!needed && !(await listener.connectionWaits())) return;
      if (this.#closed) return;
      const ended = Promise.withResolvers<number>();
      this.#ended = ended;
      try {
        await this.#startService(listener.fd);
      } catch (err: unknown) {
        this.#settings.log.error("cannot start the job service", { error: String(err) });
        ended.resolve(RESTART_MAX_MS);
      }
      const delay = await ended.promise;
      if (!this.#closed) await new Promise((resolve) => setTimeout(resolve, delay));
    }
  }

  async #startService(listenFd: number): Promise<void> {
    const [ours, theirs] = channelPair();
    let setup: ReturnType<typeof serviceFileActions>;
    try {
      setup = serviceFileActions([[theirs, CONTROL_FD], [listenFd, LISTEN_FD]]);
    } catch (err: unknown) {
      closeFd(ours);
      closeFd(theirs);
      throw err;
    }
    const { spool, logArgs } = this.#settings;
    const argv = [
      ...serviceCommand(),
      "--spool",
      spool,
      "--parent",
      String(Deno.pid),
      ...logArgs,
    ];
    let result: SpawnResult;
    try {
      result = await spawnAsync({
        path: encoder.encode(argv[0]),
        argv: argv.map((word) => encoder.encode(word)),
        env: SERVICE_ENVIRONMENT.map((entry) => encoder.encode(entry)),
        fileActions: setup.actions,
        blocked: [SIGUSR1],
      });
    } finally {
      setup.release();
      closeFd(theirs);
    }
    const channel = new Channel(ours);
    if (result.kind === "failed") {
      channel.close();
      throw new Error(`errno ${result.errno}`);
    }
    this.#channel = channel;
    this.#servicePid = result.pid;
    this.#serviceStartedAtMs = performance.now();
    this.#oomKillsAtStart = this.#oomKills();
    preferAsOomVictim(result.pid);
    this.#settings.log.info("job service started", { pid: result.pid });
    void this.#receive(channel);
  }

  async #receive(channel: Channel): Promise<void> {
    for (;;) {
      const message = await channel.receive();
      if (message === null) break;
      for (const fd of message.fds) closeFd(fd); // the service sends none
      try {
        await this.#handle(JSON.parse(decoder.decode(message.data)) as ToJobHost);
      } catch (err: unknown) {
        this.#settings.log.error("job service request failed", { error: String(err) });
      }
    }
    if (this.#channel === channel) this.#channel = null;
    channel.close();
  }

  #send(message: FromJobHost, fds: readonly number[] = []): void {
    const channel = this.#channel;
    if (channel === null) return; // down: a restarted service gets the state at once
    void channel.send(encoder.encode(JSON.stringify(message)), fds);
  }

  async #handle(message: ToJobHost): Promise<void> {
    switch (message.type) {
      case "listening":
        return await this.#listened();
      case "failed":
        // It exits next: its reap sets when it may start again (#serviceEnded).
        this.#settings.log.error("the job service cannot serve", {
          error: `${message.kind}: ${message.message}`,
        });
        return;
      case "run":
        return await this.#run(message);
      case "signal":
        return this.#signal(message.seq, message.signo);
      case "watch-group":
        return this.#watch(message.seq);
      case "output-done":
        return this.#outputDone(message.seq);
      case "forget":
        return this.#forget(message.seq);
      case "counts":
        return this.#settings.onCounts(message.counts);
    }
  }

  /** The service listens: a restarted one gets every job denit still holds. */
  async #listened(): Promise<void> {
    const again = this.#listenedOnce;
    this.#listenedOnce = true;
    if (!again) return;
    this.#settings.log.info("job service listening again", { pid: this.#servicePid });
    // A spawn the last service asked for finishes first: its job is among those sent.
    while (this.#spawning > 0) await this.#spawned.promise;
    for (const job of this.#jobs.values()) {
      this.#send(
        { type: "job", seq: job.seq, pid: job.pid, end: job.end, groupGone: job.groupGone },
        job.pipes,
      );
    }
    this.#send({ type: "resumed" });
    if (this.#stopping) this.#send({ type: "stopping" });
  }

  async #run(request: Extract<ToJobHost, { type: "run" }>): Promise<void> {
    if (this.#stopping) {
      this.#send({ type: "refused", seq: request.seq, message: "denit is stopping: no new jobs" });
      return;
    }
    const pipes = [openPipe(), openPipe()];
    const [out, err] = pipes;
    if (
      out === undefined || err === undefined || typeof out === "number" || typeof err === "number"
    ) {
      for (const pipe of pipes) {
        if (typeof pipe === "object") [pipe.read, pipe.write].forEach(closeFd);
      }
      this.#send({
        type: "not-started",
        seq: request.seq,
        exitCode: 125,
        message: "no pipe for its output",
      });
      return;
    }
    this.#spawning++;
    let result: number | ExecError;
    try {
      result = await this.#spawnJob(request, out.write, err.write);
    } finally {
      this.#spawning--;
      this.#spawned.resolve();
      this.#spawned = Promise.withResolvers<void>();
      // The job has its copies (or never will): its output ends when every holder is gone.
      closeFd(out.write);
      closeFd(err.write);
    }
    if (typeof result !== "number") {
      closeFd(out.read);
      closeFd(err.read);
      this.#send({
        type: "not-started",
        seq: request.seq,
        exitCode: result.exitCode,
        message: result.message,
      });
      return;
    }
    const job: HeldJob = {
      seq: request.seq,
      pid: result,
      pipes: [out.read, err.read],
      end: null,
      groupGone: false,
      watched: false,
      recorded: false,
    };
    this.#jobs.set(job.seq, job);
    this.#byPid.set(job.pid, job);
    this.#send({ type: "spawned", seq: job.seq, pid: job.pid }, job.pipes);
    this.#settings.log.info("job started", { pid: job.pid });
    // Reaped while its spawn was under way (a job that ended at once): its status is here.
    const early = this.#unclaimed.get(job.pid);
    if (early !== undefined) {
      this.#unclaimed.delete(job.pid);
      this.reaped(job.pid, early);
    }
  }

  async #spawnJob(
    request: Extract<ToJobHost, { type: "run" }>,
    stdout: number,
    stderr: number,
  ): Promise<number | ExecError> {
    const name = request.argv[0] ?? "";
    // A relative name with a slash is relative to the job's directory, as after its chdir.
    const base = request.workDir !== null && name.includes("/") && !name.startsWith("/")
      ? `${request.workDir.replace(/\/+$/, "")}/${name}`
      : name;
    const env = jobEnvironment(request.env);
    let path: Uint8Array;
    try {
      path = resolveCommand(base, pathOf(env));
    } catch (err: unknown) {
      if (err instanceof ExecError) return err;
      throw err;
    }
    const argv = request.argv.map((arg) => encoder.encode(arg));
    const actions = jobFileActions({ stdout, stderr, workDir: request.workDir });
    try {
      let command: Executable = { path, argv };
      let result = await spawnAsync({ ...command, env, fileActions: actions });
      if (result.kind === "failed" && result.errno === Errno.ENOEXEC) {
        const fallback = shellFallback(command);
        if (fallback !== null) {
          command = fallback;
          result = await spawnAsync({ ...command, env, fileActions: actions });
        }
      }
      if (result.kind === "spawned") return result.pid;
      return execFailure(name, command.path, result.errno);
    } finally {
      destroyFileActions(actions);
    }
  }

  #signal(seq: number, signo: number): void {
    const job = this.#jobs.get(seq);
    // Its own process already ended (reaped, or a zombie about to be): the job's end is its own.
    const alive = job !== undefined && job.end === null && !hasTerminated(job.pid);
    this.#send({ type: "signalled", seq, alive });
    if (job === undefined || job.groupGone) {
      this.#send({ type: "group-gone", seq });
      return;
    }
    const result = sendSignal(-job.pid, signo);
    if (!result.ok && result.errno === Errno.ESRCH) this.#groupGone(job);
    else {this.#settings.log.info("signal sent to a job", {
        signal: signalName(signo),
        group: job.pid,
      });}
  }

  #watch(seq: number): void {
    const job = this.#jobs.get(seq);
    if (job === undefined || job.groupGone) {
      this.#send({ type: "group-gone", seq });
      return;
    }
    job.watched = true;
    this.#checkGroup(job);
  }

  #outputDone(seq: number): void {
    const job = this.#jobs.get(seq);
    if (job === undefined) return;
    for (const fd of job.pipes) closeFd(fd);
    job.pipes = [];
    this.#dropIfDone(job);
  }

  #forget(seq: number): void {
    const job = this.#jobs.get(seq);
    if (job === undefined) return;
    job.recorded = true;
    this.#dropIfDone(job);
  }

  /**
   * A job is dropped once the service recorded its end, its output ended and no process of its
   * group is left: until then a Cancel can still reach what it left in its group.
   */
  #dropIfDone(job: HeldJob): void {
    if (!job.recorded || job.pipes.length > 0 || !job.groupGone) return;
    this.#jobs.delete(job.seq);
    this.#byPid.delete(job.pid);
  }

  /**
   * Called for every reaped pid that was not the main child; true if it was a job or the
   * service (not an orphan for -w).
   */
  reaped(pid: number, status: ExitStatus): boolean {
    if (pid === this.#servicePid && pid !== 0) {
      this.#serviceEnded(status);
      return true;
    }
    const job = this.#byPid.get(pid);
    if (job === undefined) {
      if (this.#spawning === 0) return false;
      // Perhaps a job whose spawn has not answered yet: its status waits for it.
      if (this.#unclaimed.size < UNCLAIMED_LIMIT) this.#unclaimed.set(pid, status);
      return true;
    }
    job.end = {
      code: status.kind === "exited" ? status.code : null,
      signal: status.kind === "signaled" ? signalName(status.signo) : null,
    };
    this.#send({ type: "exited", seq: job.seq, ...job.end });
    this.#checkGroup(job);
    return true;
  }

  /** After every round of reaping: the groups of ended jobs may have emptied. */
  afterRound(): void {
    for (const job of this.#jobs.values()) if (job.end !== null) this.#checkGroup(job);
  }

  #checkGroup(job: HeldJob): void {
    if (job.end === null || job.groupGone) return;
    // kill(-pgid, 0): ESRCH once no process (not even a zombie) is left in the group.
    const probe = sendSignal(-job.pid, 0);
    if (!probe.ok && probe.errno === Errno.ESRCH) this.#groupGone(job);
  }

  #groupGone(job: HeldJob): void {
    job.groupGone = true;
    if (job.watched) this.#send({ type: "group-gone", seq: job.seq });
    this.#dropIfDone(job);
  }

  #serviceEnded(status: ExitStatus): void {
    const ran = performance.now() - this.#serviceStartedAtMs;
    this.#servicePid = 0;
    this.#channel?.close();
    this.#channel = null;
    // Killed by the OOM killer: the container is out of memory, and a service started again at
    // once would take back what the process that grows needs (and be killed again).
    const oom = status.kind === "signaled" && status.signo === SIGKILL && this.#oomKillsRose();
    if (oom) this.#settings.onOomKill();
    if (ran >= RESTART_RESET_AFTER_MS) this.#restartDelayMs = RESTART_FIRST_MS;
    const delay = oom ? RESTART_MAX_MS : this.#restartDelayMs;
    this.#restartDelayMs = Math.min(delay * 2, RESTART_MAX_MS);
    this.#ended?.resolve(delay);
    this.#ended = null;
    if (this.#stopping || this.#closed) return;
    const how = status.kind === "exited"
      ? `exited with code ${status.code}`
      : oom
      ? "was killed by the kernel's OOM killer"
      : `was killed by ${signalName(status.signo)}`;
    const when = this.#jobs.size > 0
      ? `in ${delay} ms`
      : `at the next connection, ${delay} ms from now at the earliest`;
    this.#settings.log.warn(`the job service ${how}; starting it again ${when}`, {
      jobs: this.#jobs.size,
    });
  }

  #oomKills(): number | null {
    return this.#memory === null ? null : readOomKills(this.#memory);
  }

  /** The memory cgroup counted an OOM kill since the service started. */
  #oomKillsRose(): boolean {
    const before = this.#oomKillsAtStart;
    const now = this.#oomKills();
    return before !== null && now !== null && now > before;
  }

  /** denit is stopping (a stop signal, or the main child ended): no new jobs from now on. */
  stopping(): void {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#send({ type: "stopping" });
  }

  /** At denit's end: the service gets SIGTERM (the leftover sweep stops what remains). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopping = true;
    if (this.#servicePid !== 0) sendSignal(this.#servicePid, SIGTERM);
    this.#channel?.close();
    this.#channel = null;
    this.#listener?.close();
    this.#ended?.resolve(0);
    try {
      Deno.removeSync(this.#settings.socket);
    } catch {
      // Never made, or removed by the service already.
    }
  }
}

/** denit's own environment, byte for byte, with the job's KEY=VALUE entries added or replacing. */
function jobEnvironment(overrides: readonly string[]): Uint8Array[] {
  const keys = new Set(overrides.map((entry) => entry.slice(0, entry.indexOf("="))));
  const inherited = environEntries().filter((entry) => {
    const equals = entry.indexOf(0x3d); // "="
    return equals <= 0 || !keys.has(decoder.decode(entry.subarray(0, equals)));
  });
  return [...inherited, ...overrides.map((entry) => encoder.encode(entry))];
}

/** PATH of an environment, as a string (for the lookup). */
function pathOf(env: readonly Uint8Array[]): string | undefined {
  const prefix = encoder.encode("PATH=");
  const entry = env.findLast((e) => prefix.every((byte, i) => e[i] === byte));
  return entry === undefined ? undefined : decoder.decode(entry.subarray(prefix.length));
}
