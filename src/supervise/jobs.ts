/**
 * The supervisor's side of the job service (`--jobs-socket`): it spawns the jobs the service
 * asks for, signals their process groups and tells the service when the one reaper reaped
 * them. Spawning, signalling and reaping all happen on this thread, as for the main child, so
 * a job's pid or group is never signalled after it was reaped (and perhaps reused).
 * Loaded only with --jobs-socket.
 */

import type { FromJobHost, JobCounts, ToJobHost } from "../common/jobs.ts";
import type { Logger } from "../common/log.ts";
import { signalName } from "../common/signals.ts";
import { Errno, type ExitStatus, sendSignal, spawn } from "../sys/process.ts";
import { closeFd, destroyFileActions, jobFileActions } from "../sys/pipes.ts";
import {
  ExecError,
  execFailure,
  type Executable,
  resolveCommand,
  shellFallback,
} from "./command.ts";

/** What the host needs from the service's thread: a way to answer it. */
export interface JobLink {
  send(message: FromJobHost): void;
}

interface Running {
  readonly seq: number;
  readonly pid: number;
  /** Reaped: the group may live on (its other members), but the pid is not ours any more. */
  reaped: boolean;
  /** Cancel waits for the group to be empty: checked after every round of reaping. */
  watched: boolean;
}

const encoder = new TextEncoder();

function envValue(env: readonly string[], key: string): string | undefined {
  const prefix = `${key}=`;
  const entry = env.findLast((e) => e.startsWith(prefix));
  return entry?.slice(prefix.length);
}

/** Spawns, signals and reports jobs; the supervisor calls `reaped()` for every reaped pid. */
export class JobHost {
  readonly #link: JobLink;
  readonly #log: Logger;
  readonly #onCounts: (counts: JobCounts) => void;
  readonly #bySeq = new Map<number, Running>();
  readonly #byPid = new Map<number, Running>();

  constructor(link: JobLink, log: Logger, onCounts: (counts: JobCounts) => void) {
    this.#link = link;
    this.#log = log;
    this.#onCounts = onCounts;
  }

  /** A message from the service's thread. Never throws: a failure is a log line. */
  handle(message: ToJobHost): void {
    try {
      switch (message.type) {
        case "run":
          return this.#run(message);
        case "signal":
          return this.#signal(message.seq, message.signo);
        case "watch-group":
          return this.#watch(message.seq);
        case "counts":
          return this.#onCounts(message.counts);
        case "failed":
          // The service's thread died (an uncaught error): the supervisor and the jobs go on.
          return this.#log.error(`the job service stopped: ${message.message}`);
        case "listening":
          return;
      }
    } catch (err: unknown) {
      this.#log.error("job service request failed", { error: String(err) });
    }
  }

  #run(request: Extract<ToJobHost, { type: "run" }>): void {
    try {
      const result = this.#spawn(request);
      if (typeof result === "number") {
        const job: Running = { seq: request.seq, pid: result, reaped: false, watched: false };
        this.#bySeq.set(job.seq, job);
        this.#byPid.set(job.pid, job);
        this.#link.send({ type: "spawned", seq: job.seq, pid: job.pid });
        this.#log.info("job started", { pid: job.pid });
      } else {
        this.#link.send({
          type: "not-started",
          seq: request.seq,
          exitCode: result.exitCode,
          message: result.message,
        });
      }
    } finally {
      // The job has its copies (or never will): the service sees the end of output once
      // every process holding them is gone.
      closeFd(request.stdout);
      closeFd(request.stderr);
    }
  }

  #spawn(request: Extract<ToJobHost, { type: "run" }>): number | ExecError {
    const name = request.argv[0] ?? "";
    // A relative name with a slash is relative to the job's directory, as after its chdir.
    const base = request.workDir !== null && name.includes("/") && !name.startsWith("/")
      ? `${request.workDir.replace(/\/+$/, "")}/${name}`
      : name;
    let path: Uint8Array;
    try {
      path = resolveCommand(base, envValue(request.env, "PATH"));
    } catch (err: unknown) {
      if (err instanceof ExecError) return err;
      throw err;
    }
    const argv = request.argv.map((arg) => encoder.encode(arg));
    const env = request.env.map((entry) => encoder.encode(entry));
    const actions = jobFileActions(request);
    try {
      let command: Executable = { path, argv };
      let result = spawn({ ...command, env, fileActions: actions });
      if (result.kind === "failed" && result.errno === Errno.ENOEXEC) {
        const fallback = shellFallback(command);
        if (fallback !== null) {
          command = fallback;
          result = spawn({ ...command, env, fileActions: actions });
        }
      }
      if (result.kind === "spawned") return result.pid;
      return execFailure(name, command.path, result.errno);
    } finally {
      destroyFileActions(actions);
    }
  }

  #signal(seq: number, signo: number): void {
    const job = this.#bySeq.get(seq);
    if (job === undefined) return; // its group is gone: nothing of it may be signalled
    const result = sendSignal(-job.pid, signo);
    if (!result.ok && result.errno === Errno.ESRCH) this.#groupGone(job);
    else this.#log.info("signal sent to a job", { signal: signalName(signo), group: job.pid });
  }

  #watch(seq: number): void {
    const job = this.#bySeq.get(seq);
    if (job === undefined) {
      this.#link.send({ type: "group-gone", seq });
      return;
    }
    job.watched = true;
    this.#checkGroup(job);
  }

  /** After a round of reaping: called with every reaped pid that was not the main child. */
  reaped(pid: number, status: ExitStatus): boolean {
    const job = this.#byPid.get(pid);
    if (job === undefined) return false;
    this.#byPid.delete(pid);
    job.reaped = true;
    this.#link.send({
      type: "exited",
      seq: job.seq,
      code: status.kind === "exited" ? status.code : null,
      signal: status.kind === "signaled" ? signalName(status.signo) : null,
    });
    if (!job.watched) this.#checkGroup(job);
    return true;
  }

  /** After every round of reaping: groups that Cancel waits for may have emptied. */
  afterRound(): void {
    for (const job of this.#bySeq.values()) if (job.reaped) this.#checkGroup(job);
  }

  #checkGroup(job: Running): void {
    // kill(-pgid, 0): ESRCH once no process (not even a zombie) is left in the group.
    if (!job.reaped) return;
    const probe = sendSignal(-job.pid, 0);
    if (!probe.ok && probe.errno === Errno.ESRCH) this.#groupGone(job);
    else if (!job.watched) {
      // Not cancelled: the job is over once its leader is; its group is none of ours to wait for.
      this.#bySeq.delete(job.seq);
    }
  }

  #groupGone(job: Running): void {
    this.#bySeq.delete(job.seq);
    this.#byPid.delete(job.pid);
    this.#link.send({ type: "group-gone", seq: job.seq });
  }
}
