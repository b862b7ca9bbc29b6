/**
 * `--kill-orphans`: a process reparented to denit while the main child runs (a daemon that a CI
 * step left behind, say) gets SIGTERM when found, and SIGKILL GRACE later if it is still there.
 * The kernel says nothing when it reparents a running process, so denit reads its own children
 * (/proc/self/task/TID/children) every ORPHAN_SCAN_MS. Never touched: the main child, every
 * member of its process group, and denit's own processes (the job service and its keepers, whose
 * executable is denit's runtime or launcher).
 */

import { errorLine } from "../common/errors.ts";
import { quietDelay } from "../common/delay.ts";
import { formatDuration } from "../common/duration.ts";
import type { Logger } from "../common/log.ts";
import { SIGKILL, signalName, SIGTERM } from "../common/signals.ts";
import { sendSignal } from "../sys/process.ts";
import { launcherPath } from "../common/paths.ts";
import { childrenOf, describeProcess, formatProcesses, type ProcessInfo } from "./leftovers.ts";

/** How often denit looks for processes reparented to it. */
export const ORPHAN_SCAN_MS = 1000;

/** What the patrol asks the supervisor. */
export interface PatrolSettings {
  readonly graceMs: number;
  readonly log: Logger;
  /** A warn line per process (`-w`); else an info line. */
  readonly loud: boolean;
  /** The main child's pid while it runs; null once it ended (the patrol stops). */
  readonly mainChild: () => number | null;
  /** Runs a /proc read, freeing a reserved descriptor if none is left (supervisor's #spare). */
  readonly spare: <T>(work: () => T) => T;
}

/**
 * Whether a process is denit's own (the job service, a job's keeper): its executable is denit's
 * runtime or launcher. False when it cannot be told (gone, or mid-exec).
 */
function isDenitProcess(pid: number): boolean {
  try {
    const executable = Deno.readLinkSync(`/proc/${pid}/exe`);
    return executable === Deno.execPath() || executable === launcherPath();
  } catch {
    return false;
  }
}

/** Finds orphans while the main child runs and stops each once. */
export class OrphanPatrol {
  readonly #settings: PatrolSettings;
  /**
   * Processes signalled so far, by pid: their start time. One spared is looked at again at the
   * next scan (a member of the child's group may leave it with setsid, a process may exec).
   */
  readonly #seen = new Map<number, string>();

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
    const { spare } = this.#settings;
    const orphans: ProcessInfo[] = [];
    for (const pid of spare(() => childrenOf("self"))) {
      if (pid === child) continue;
      const info = spare(() => describeProcess(pid));
      if (info.startTime === "" || this.#seen.get(pid) === info.startTime) continue;
      if (info.state === "Z" || info.pgid === child) continue;
      if (isDenitProcess(pid)) continue;
      this.#seen.set(pid, info.startTime);
      if (sendSignal(pid, SIGTERM).ok) orphans.push(info);
    }
    if (orphans.length === 0) return;
    this.#say(`SIGTERM to processes reparented to denit (--kill-orphans)`, orphans);
    void this.#killLater(orphans).catch((err: unknown) => this.#failed(err));
  }

  async #killLater(orphans: readonly ProcessInfo[]): Promise<void> {
    await quietDelay(this.#settings.graceMs);
    // Only the same processes (pid and start time), and only while the main child runs: after
    // its end the leftover sweep stops every process, these included.
    if (this.#settings.mainChild() === null) return;
    const killed = orphans.map((p) => this.#settings.spare(() => describeProcess(p.pid)))
      .filter((now, i) =>
        now.startTime === orphans[i]?.startTime && now.state !== "Z" &&
        sendSignal(now.pid, SIGKILL).ok
      );
    if (killed.length === 0) return;
    const grace = formatDuration(this.#settings.graceMs);
    this.#say(
      `${signalName(SIGKILL)} to reparented processes still running after ${grace}`,
      killed,
    );
  }

  #failed(err: unknown): void {
    const error = errorLine(err);
    this.#settings.log.error("--kill-orphans failed this time; denit goes on", { error });
  }

  #say(what: string, processes: readonly ProcessInfo[]): void {
    const { log, loud } = this.#settings;
    for (const p of processes) {
      const line = `${what}: ${formatProcesses([p])}`;
      if (loud) log.warn(line);
      else log.info(line);
    }
  }
}
