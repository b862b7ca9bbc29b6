/**
 * The contract between the job service's process (src/jobs) and denit (src/supervise), which
 * alone spawns, signals and reaps: the messages they exchange over the control channel (JSON,
 * one per datagram; a job's output pipes travel as descriptors with `spawned` and `job`), and the
 * counts /status and /metrics show. Neither program imports the other.
 */

/** A job's end, as denit reaped it: an exit code, or a signal's name. */
export interface JobEnd {
  readonly code: number | null;
  readonly signal: string | null;
}

/** The service → denit. `seq` numbers the jobs of this run of denit (ids are the clients'). */
export type ToJobHost =
  /** The service listens on its socket (sent once per start of the service). */
  | { type: "listening" }
  /** It cannot listen: the error's class name and message (denit's start then fails). */
  | { type: "failed"; kind: string; message: string }
  | {
    type: "run";
    seq: number;
    argv: readonly string[];
    workDir: string | null;
    /** "KEY=VALUE" entries added to (or replacing in) denit's own environment. */
    env: readonly string[];
  }
  /** A signal to the job's process group (only while some of it may be alive). */
  | { type: "signal"; seq: number; signo: number }
  /** Tell when the job's process group is empty (for Cancel). */
  | { type: "watch-group"; seq: number }
  /** The job's output ended (both pipes): denit closes the read ends it kept. */
  | { type: "output-done"; seq: number }
  /** The job's end is recorded in the spool: denit forgets the job. */
  | { type: "forget"; seq: number }
  | { type: "counts"; counts: JobCounts };

/** denit → the service. */
export type FromJobHost =
  /** Started: the descriptors of its stdout and stderr pipes (read ends) come with this. */
  | { type: "spawned"; seq: number; pid: number }
  /** Could not be run: 126 or 127 with the reason, as a shell would print it; or refused. */
  | { type: "not-started"; seq: number; exitCode: number; message: string }
  /** denit is stopping: the job was never started, and is no job at all (UNAVAILABLE). */
  | { type: "refused"; seq: number; message: string }
  | ({ type: "exited"; seq: number } & JobEnd)
  | { type: "group-gone"; seq: number }
  /** The answer to `signal`: whether the job's own process was still running then. */
  | { type: "signalled"; seq: number; alive: boolean }
  /**
   * After a restart of the service: a job denit still holds, with its pipes' read ends (while
   * its output has not ended), its end if denit reaped it meanwhile, and whether its group is gone.
   */
  | { type: "job"; seq: number; pid: number; end: JobEnd | null; groupGone: boolean }
  /** Every held job was sent. */
  | { type: "resumed" }
  /** denit is stopping: new jobs are refused from now on. */
  | { type: "stopping" };

/** Jobs by outcome, for /status and /metrics. */
export interface JobCounts {
  readonly running: number;
  readonly started: number;
  readonly succeeded: number;
  readonly failed: number;
  readonly cancelled: number;
}

/** Where `denit job` and `denit bridge` look for the service unless told (the README's path). */
export const DEFAULT_JOBS_SOCKET = "/run/denit/jobs.sock";

/** The descriptor on which the service's process finds its end of the control channel. */
export const CONTROL_FD = 3;
/** The descriptor on which it finds the job socket, listening (denit holds it for the run). */
export const LISTEN_FD = 4;
