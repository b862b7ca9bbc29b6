/** The supervisor's state as the health endpoint sees it, frozen (neither imports the other). */

import type { ListenAddress } from "./address.ts";
import type { ReadyCheck } from "./ready.ts";

/** Jobs by outcome, for /status and /metrics (the job service writes them, src/jobs/contract.ts). */
export type JobCounts = Readonly<Record<"running" | "started" | JobOutcome, number>>;

/** How a job that finished ended. */
export type JobOutcome = "succeeded" | "failed" | "cancelled";

/** The supervisor's state names, as /status reports them. */
export type StateName = "starting" | "running" | "stopping" | "exited";

/** The container's memory cgroup: the version and oom.group read at start, the limit when asked. */
export interface MemoryFacts {
  readonly cgroup: 1 | 2;
  readonly limitBytes: number | null;
  /** v2 `memory.oom.group` (an OOM kill ends every process at once); null on v1. */
  readonly oomGroup: boolean | null;
}

export interface Snapshot {
  readonly state: StateName;
  readonly pid: number | null;
  readonly startedAtMs: number | null;
  readonly exitedAtMs: number | null;
  readonly exitCode: number | null;
  readonly exitSignal: string | null;
  readonly zombiesReaped: number;
  readonly signalsForwarded: Readonly<Record<string, number>>;
  /** Zombies denit cannot reap (their parent is alive and does not wait), at the last scan. */
  readonly unreapedZombies: number;
  /** Their parents, most zombies first (at most 5). */
  readonly zombieParents: ReadonlyArray<{ pid: number; name: string; zombies: number }>;
  /** When the last scan for them ended (epoch ms); null before the first. */
  readonly zombiesCheckedAtMs: number | null;
  /** Why the child ended: exited, oom, grace, timeout, forwarded or external. */
  readonly exitCause: string | null;
  /** The same, as a sentence ("the child was killed by SIGKILL: the kernel's OOM killer..."). */
  readonly exitReason: string | null;
  /** Once the child exited: stopping leftovers, or waiting for descendants to end. */
  readonly cleanup: "terminating" | "killing" | "waiting" | null;
  /** Why the child is being stopped (state "stopping"): a stop signal, or --timeout. */
  readonly stopCause: "signal" | "timeout" | null;
  /** While --shutdown-delay holds a stop signal back: when it will be forwarded at the latest. */
  readonly drainingUntilMs: number | null;
  readonly deadlineAtMs: number | null;
  /** The memory cgroup denit and the child are in, as found at start; null: none found. */
  readonly memory: MemoryFacts | null;
  /** With --jobs-socket: the jobs by outcome; null without the job service. */
  readonly jobs: JobCounts | null;
}

/** /status's "settings": the options as given (durations in seconds), fixed for the run. */
export type StatusSettings = Readonly<Record<string, string | number | boolean | null>>;

export interface SnapshotSource {
  snapshot(): Snapshot;
}

/** The health endpoint as the supervisor holds it: closed at exit. */
export interface HealthHandle {
  close(): void;
  /** Where it listens: the port the kernel chose for 0, 0.0.0.0 where "::" found no IPv6. */
  readonly address: ListenAddress;
  /** `--ready-when notify`: the socket's name, for the child's NOTIFY_SOCKET. */
  readonly notifySocket: string | null;
}

/** What the health endpoint is told besides its address and the snapshot's source. */
export interface HealthOptions {
  readonly supervisorStartedAtMs: number;
  readonly settings: StatusSettings;
  readonly readyWhen: ReadyCheck | null;
  /** denit's open-file soft limit (null: none): the endpoint's clients leave room below it. */
  readonly fileLimit: number | null;
}

/** Starts the health endpoint, answering from the snapshot at each request; rejects if unbound. */
export type HealthStarter = (
  address: ListenAddress,
  source: SnapshotSource,
  options: HealthOptions,
) => Promise<HealthHandle>;
