/**
 * A job's state line, `N.state` in the run's directory: written by its keeper (launch/keep.c,
 * STATE_BYTES), read here for the job service and for denit, which counts the jobs that run
 * while the service is down.
 */

import { readProcStat } from "./proc.ts";

/** What `N.state` holds: the keeper's part. */
export interface KeeperState {
  readonly pid: number;
  /** The keeper's own pid: Cancel asks it (SIGUSR1). */
  readonly keeper: number;
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

/** Parses `pid=P exit=C ...`; null for anything else (a file being replaced, say). */
export function parseState(text: string): KeeperState | null {
  const fields = new Map(text.trim().split(" ").map((pair) => pair.split("=") as [string, string]));
  const field = (key: string) => {
    const value = Number(fields.get(key) ?? NaN);
    return Number.isInteger(value) ? value : NaN;
  };
  const state = {
    pid: field("pid"),
    keeper: field("keeper"),
    exit: field("exit"),
    signal: field("signal"),
    finished: field("finished"),
    truncated: field("truncated"),
    lost: field("lost"),
    ended: field("ended"),
    oom: field("oom"),
  };
  return Object.values(state).some(Number.isNaN) ? null : state;
}

/** Whether the state says the job runs: not finished, and its keeper is alive as denit's child. */
export function stillRuns(state: KeeperState, denitPid: number): boolean {
  if (state.finished !== 0) return false;
  try {
    return Number(readProcStat(state.keeper).field(4)) === denitPid;
  } catch {
    return false; // the keeper is gone
  }
}
