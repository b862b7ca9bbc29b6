/**
 * The supervisor's state as observers see it (the health endpoint, later the job service):
 * a frozen value, read and never written. The contract between the supervisor and the
 * programs that report on it, so that neither imports the other.
 */

/** The supervisor's state names, as /status reports them. */
export type StateName = "starting" | "running" | "stopping" | "exited";

/** A read-only picture of the supervisor. */
export interface Snapshot {
  readonly state: StateName;
  readonly pid: number | null;
  readonly startedAtMs: number | null;
  readonly exitedAtMs: number | null;
  readonly exitCode: number | null;
  readonly exitSignal: string | null;
  readonly zombiesReaped: number;
  readonly signalsForwarded: Readonly<Record<string, number>>;
}

/** Where a snapshot comes from. */
export interface SnapshotSource {
  snapshot(): Snapshot;
}
