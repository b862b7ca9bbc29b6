/**
 * `--kill-orphans`: a process reparented to denit while the child runs gets SIGTERM, SIGKILL
 * GRACE later. An orphan is known by session and group (one that forks again is one orphan).
 */

import { errorLine } from "../common/errors.ts";
import { quietDelay } from "../common/delay.ts";
import { formatDuration } from "../common/duration.ts";
import type { Logger } from "../common/log.ts";
import { SIGKILL, signalName, SIGTERM } from "../common/signals.ts";
import { sendSignal } from "../sys/process.ts";
import { describeProcess, type ProcessInfo } from "../common/proc.ts";
import { childrenOf, formatProcesses } from "./leftovers.ts";

/** How often denit looks for processes reparented to it. */
export const ORPHAN_SCAN_MS = 1000;

/** What the patrol asks the supervisor. */
export interface PatrolSettings {
  readonly graceMs: number;
  readonly log: Logger;
  /** The main child's pid while it runs; null once it ended (the patrol stops). */
  readonly mainChild: () => number | null;
  /** denit's own processes (the job service, the jobs' keepers), read once a scan. */
  readonly own: () => ReadonlySet<number>;
}

/** An orphan's family: what a process that forks and exits keeps (its session and group). */
function familyOf(info: ProcessInfo): string {
  return `${info.sid}:${info.pgid}`;
}

/** Finds orphans while the main child runs and stops each once. */
export class OrphanPatrol {
  readonly #settings: PatrolSettings;
  /** Processes signalled so far: pid → start time. */
  readonly #seen = new Map<number, string>();
  /** The families sent SIGTERM, with when their grace ends (performance.now() ms). */
  readonly #families = new Map<string, number>();

  constructor(settings: PatrolSettings) {
    this.#settings = settings;
  }

  /** Patrols until the main child ended; a failure is one error line, and the next scan comes. */
  async run(): Promise<void> {
    for (let child = this.#settings.mainChild(); child !== null;) {
      try {
        this.#scan(child);
      } catch (err: unknown) {
        this.#failed(err);
      }
      await quietDelay(ORPHAN_SCAN_MS);
      child = this.#settings.mainChild();
    }
  }

  #scan(child: number): void {
    const orphans: ProcessInfo[] = [];
    const overdue: ProcessInfo[] = [];
    let own: ReadonlySet<number> | null = null;
    for (const pid of childrenOf("self")) {
      if (pid === child) continue;
      const info = describeProcess(pid);
      if (info.startTime === "" || this.#seen.get(pid) === info.startTime) continue;
      if (info.state === "Z" || info.pgid === child) continue;
      own ??= this.#settings.own();
      if (own.has(pid)) continue;
      this.#seen.set(pid, info.startTime);
      const graceEnds = this.#families.get(familyOf(info));
      if (graceEnds === undefined) {
        if (sendSignal(pid, SIGTERM).ok) orphans.push(info);
      } else if (performance.now() >= graceEnds) {
        // A new pid of a family whose grace is over: it forked to outlive its TERM.
        if (sendSignal(pid, SIGKILL).ok) overdue.push(info);
      } else void this.#killLater([info], graceEnds).catch((err) => this.#failed(err));
    }
    this.#killed(overdue);
    if (orphans.length === 0) return;
    const graceEnds = performance.now() + this.#settings.graceMs;
    for (const info of orphans) this.#families.set(familyOf(info), graceEnds);
    this.#say(`SIGTERM to processes reparented to denit (--kill-orphans)`, orphans);
    void this.#killLater(orphans, graceEnds).catch((err: unknown) => this.#failed(err));
  }

  #killed(processes: readonly ProcessInfo[]): void {
    const grace = formatDuration(this.#settings.graceMs);
    const what = `${signalName(SIGKILL)} to reparented processes still running after ${grace}`;
    this.#say(what, processes);
  }

  async #killLater(orphans: readonly ProcessInfo[], graceEnds: number): Promise<void> {
    await quietDelay(Math.max(0, graceEnds - performance.now()));
    // Only the same processes (pid and start time), and only while the main child runs: after
    // its end the leftover sweep stops every process, these included.
    if (this.#settings.mainChild() === null) return;
    const killed = orphans.map((p) => describeProcess(p.pid))
      .filter((now, i) =>
        now.startTime === orphans[i]?.startTime && now.state !== "Z" &&
        sendSignal(now.pid, SIGKILL).ok
      );
    this.#killed(killed);
  }

  #failed(err: unknown): void {
    const error = errorLine(err);
    this.#settings.log.error("--kill-orphans failed this time; denit goes on", { error });
  }

  /** One warn line a process: a stopped daemon a step still needed shows at the default level. */
  #say(what: string, processes: readonly ProcessInfo[]): void {
    for (const p of processes) this.#settings.log.warn(`${what}: ${formatProcesses([p])}`);
  }
}
