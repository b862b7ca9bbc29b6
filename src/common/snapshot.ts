/**
 * The supervisor's state as observers see it (the health endpoint, later the job service):
 * a frozen value, read and never written. The contract between the supervisor and the
 * programs that report on it, so that neither imports the other.
 */

import type { JobCounts } from "./job_paths.ts";
import type { ReadyCheck } from "./ready.ts";

/** The supervisor's state names, as /status reports them. */
export type StateName = "starting" | "running" | "stopping" | "exited";

/** The container's memory cgroup, read once at start. */
export interface MemoryFacts {
  readonly cgroup: 1 | 2;
  /** The limit in bytes; null: none. */
  readonly limitBytes: number | null;
  /** v2 `memory.oom.group` (an OOM kill ends every process at once); null on v1. */
  readonly oomGroup: boolean | null;
}

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
  /** While --shutdown-delay holds a stop signal back: when it will be forwarded. */
  readonly drainingUntilMs: number | null;
  /** With --timeout: when the child's deadline is. */
  readonly deadlineAtMs: number | null;
  /** The memory cgroup denit and the child are in, as found at start; null: none found. */
  readonly memory: MemoryFacts | null;
  /** With --jobs-socket: the jobs by outcome; null without the job service. */
  readonly jobs: JobCounts | null;
}

/** The settings observers show (/status): fixed for the run. */
export interface SupervisorSettings {
  readonly graceMs: number | null;
  readonly killAfterMs: number;
  readonly shutdownDelayMs: number;
  readonly timeoutMs: number | null;
  /** `--user` as given. */
  readonly user: string | null;
  readonly readyWhen: ReadyCheck | null;
  readonly waitDescendants: boolean;
  /** `--stop-signal` by name ("SIGUSR1"); null: TERM, INT and QUIT only. */
  readonly stopSignal: string | null;
}

/** Where a snapshot comes from. */
export interface SnapshotSource {
  snapshot(): Snapshot;
}

/**
 * The latest snapshot in shared memory, for an observer on another thread (the health
 * endpoint's worker): the supervisor writes it after every change, the observer reads it on
 * every request, and neither waits for the other. A sequence number makes a read that raced a
 * write try again (a seqlock); the text is the snapshot's JSON.
 */
export class SnapshotBoard {
  static readonly BYTES = 64 * 1024;
  readonly #header: Int32Array;
  readonly #beat: BigInt64Array;
  readonly #data: Uint8Array;
  readonly #encoder = new TextEncoder();
  readonly #decoder = new TextDecoder();
  #last: Snapshot | null = null;

  constructor(buffer: SharedArrayBuffer = new SharedArrayBuffer(SnapshotBoard.BYTES)) {
    this.#header = new Int32Array(buffer, 0, 2); // [sequence, length]
    this.#beat = new BigInt64Array(buffer, 8, 1); // the writer's last heartbeat, on its clock
    this.#data = new Uint8Array(buffer, 16);
  }

  /** The shared memory, to hand to the other thread. */
  get buffer(): SharedArrayBuffer {
    return this.#header.buffer as SharedArrayBuffer;
  }

  /** Publishes a snapshot (one writer). */
  write(snapshot: Snapshot): void {
    const bytes = this.#encoder.encode(JSON.stringify(snapshot));
    if (bytes.length > this.#data.length) return; // cannot happen: a snapshot is a few hundred bytes
    Atomics.add(this.#header, 0, 1); // odd: a write is under way
    this.#data.set(bytes);
    Atomics.store(this.#header, 1, bytes.length);
    Atomics.add(this.#header, 0, 1); // even: done
  }

  /**
   * Records that the writer's event loop turned just now: `nowMs` on the writer's monotonic
   * clock (`performance.now()`), which no step of the wall clock moves.
   */
  beat(nowMs: number): void {
    Atomics.store(this.#beat, 0, BigInt(Math.round(nowMs)));
  }

  /** When the writer's event loop last turned, on the writer's clock (0 before the first beat). */
  lastBeatMs(): number {
    return Number(Atomics.load(this.#beat, 0));
  }

  /** The latest snapshot, or null before the first write. */
  read(): Snapshot | null {
    for (let attempt = 0; attempt < 1000; attempt++) {
      const before = Atomics.load(this.#header, 0);
      if (before === 0) return null;
      if (before % 2 === 1) continue;
      const length = Atomics.load(this.#header, 1);
      const copy = this.#data.slice(0, length);
      if (Atomics.load(this.#header, 0) !== before) continue;
      this.#last = JSON.parse(this.#decoder.decode(copy)) as Snapshot;
      return this.#last;
    }
    return this.#last; // a writer far faster than this reader: the previous picture will do
  }
}
