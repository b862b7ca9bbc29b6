/**
 * How the job service, a job's keeper (launch/keep.c) and denit speak, defined here once for the
 * TypeScript side; tests/protocol_test.ts holds the C side to it. The seams:
 *
 * - the keeper's command line, `denit job keep DIR SEQ CAP [--cwd D] [--oom-count F] [--env
 *   N=V]... -- ARGV` (keeperArgv);
 * - its handshake on stdout: `pid P` once the job runs (KEEPER_STARTED);
 * - the state line `DIR/SEQ.state` (STATE_FIELDS), written by the keeper only, read by
 *   parseState only; its keeper's pid and start time say whether it lives (keeperLives);
 * - a Cancel: the grace in ms in `DIR/SEQ.cancel`, then CANCEL_SIGNAL to the keeper;
 * - the stop marker, STOPPING_FILE in the run's directory, made by denit (src/common/job_paths.ts);
 * - the listening socket and the launch record, which denit's launcher hands the service
 *   (src/sys/listener.ts, src/sys/launch.ts).
 */

import { readProcStat } from "./proc.ts";

/** What `N.state` holds: the keeper's part. */
export interface KeeperState {
  readonly pid: number;
  /** The keeper's own pid: Cancel asks it (SIGUSR1). */
  readonly keeper: number;
  /** The keeper's start time (proc(5) stat field 22): with its pid, who it is. */
  readonly since: number;
  /** The exit code; -1 while it runs or when a signal ended it. */
  readonly exit: number;
  /** The signal that ended it; 0 if none did. */
  readonly signal: number;
  readonly finished: number;
  readonly truncated: number;
  /** Bytes that could not be stored (a full or read-only disk). */
  readonly lost: number;
  /** The output ended: every writer of its pipes is gone. */
  readonly ended: number;
  /** 1: a SIGKILL while the memory cgroup counted an OOM kill (the kernel's OOM killer). */
  readonly oom: number;
}

/** The state line's fields, in the keeper's order: `pid=P keeper=K exit=C ...`. */
export const STATE_FIELDS = [
  "pid",
  "keeper",
  "since",
  "exit",
  "signal",
  "finished",
  "truncated",
  "lost",
  "ended",
  "oom",
] as const satisfies ReadonlyArray<keyof KeeperState>;

/** Parses a state line; null for anything else (a file being replaced, say). */
export function parseState(text: string): KeeperState | null {
  const fields = new Map(text.trim().split(" ").map((pair) => pair.split("=") as [string, string]));
  const state: Record<string, number> = {};
  for (const key of STATE_FIELDS) {
    const value = Number(fields.get(key) ?? NaN);
    if (!Number.isInteger(value)) return null;
    state[key] = value;
  }
  return state as unknown as KeeperState;
}

/** What the keeper says on stdout once the job runs; anything else: it could not start it. */
export const KEEPER_STARTED = /^pid \d+\n$/;

/** The signal that tells a keeper a Cancel waits in `DIR/SEQ.cancel`. */
export const CANCEL_SIGNAL = "SIGUSR1";

/** What the keeper of job `seq` of the run in `dir` needs beside the job's own argv. */
export interface KeeperOptions {
  readonly dir: string;
  readonly seq: number;
  readonly cap: number;
  readonly workDir: string | null;
  readonly oomCount: string | null;
  readonly env: readonly string[];
}

/** The keeper's command line, the launcher's path first. */
export function keeperArgv(launcher: string, o: KeeperOptions, argv: readonly string[]): string[] {
  return [
    launcher,
    "job",
    "keep",
    o.dir,
    String(o.seq),
    String(o.cap),
    ...(o.workDir === null ? [] : ["--cwd", o.workDir]),
    ...(o.oomCount === null ? [] : ["--oom-count", o.oomCount]),
    ...o.env.flatMap((entry) => ["--env", entry]),
    "--",
    ...argv,
  ];
}

/** Whether the keeper a state names still runs: its pid is alive with its start time. */
export function keeperLives(state: KeeperState): boolean {
  if (state.keeper <= 0) return false;
  try {
    return readProcStat(state.keeper).field(22) === String(state.since);
  } catch {
    return false; // gone
  }
}

/** Whether the state says the job runs: not finished, and its keeper lives. */
export function stillRuns(state: KeeperState): boolean {
  return state.finished === 0 && keeperLives(state);
}
