/**
 * The contract between the job service's thread (src/jobs) and the supervisor (src/supervise),
 * which alone spawns, signals and reaps: the messages they exchange and the counts /status
 * and /metrics show. Neither program imports the other.
 */

/** The service → the supervisor. `seq` numbers the jobs of this run (ids are the clients'). */
export type ToJobHost =
  /** The thread listens for messages (one sent earlier could be lost). */
  | { type: "ready" }
  | { type: "listening" }
  | { type: "failed"; kind: string; message: string }
  | {
    type: "run";
    seq: number;
    argv: readonly string[];
    workDir: string | null;
    /** "KEY=VALUE" entries: the whole environment of the job. */
    env: readonly string[];
    /** The pipes' write ends for stdout and stderr (the service keeps the read ends). */
    stdout: number;
    stderr: number;
  }
  /** A signal to the job's process group (only while some of it may be alive). */
  | { type: "signal"; seq: number; signo: number }
  /** Tell when the job's process group is empty (for Cancel). */
  | { type: "watch-group"; seq: number }
  | { type: "counts"; counts: JobCounts };

/** The supervisor → the service. */
export type FromJobHost =
  | { type: "start"; socket: string; spool: string }
  | { type: "spawned"; seq: number; pid: number }
  /** Could not be run: 126 or 127 with the reason, as a shell would print it. */
  | { type: "not-started"; seq: number; exitCode: number; message: string }
  | { type: "exited"; seq: number; code: number | null; signal: string | null }
  | { type: "group-gone"; seq: number };

/** Jobs by outcome, for /status and /metrics. */
export interface JobCounts {
  readonly running: number;
  readonly started: number;
  readonly succeeded: number;
  readonly failed: number;
  readonly cancelled: number;
}

/** The job service as the supervisor holds it, once it listens. */
export interface JobsChannel {
  send(message: FromJobHost): void;
  /** Every later message from the service goes to `handler`. */
  listen(handler: (message: ToJobHost) => void): void;
  /** Stops the service's thread and removes its socket. */
  close(): void;
}

/** Starts the job service on its thread; rejects with the reason it cannot listen. */
export type JobsStarter = (socket: string, spool: string) => Promise<JobsChannel>;

/** Where `denit job` and `denit bridge` look for the service unless told (the README's path). */
export const DEFAULT_JOBS_SOCKET = "/run/denit/jobs.sock";
