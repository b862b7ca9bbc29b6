/**
 * Zombies only a living parent may reap, counted by parent every ZOMBIE_SCAN_MS; with -w a line
 * per reaped orphan, at most REAPED_LINES_PER_SECOND, then one a second counting the rest.
 */

import type { Logger } from "../common/log.ts";
import type { ExitStatus } from "../sys/process.ts";
import { signalName } from "../common/signals.ts";
import { describeProcess } from "../common/proc.ts";
import { leftovers } from "./leftovers.ts";

/** How often the scan for zombies denit cannot reap runs. */
export const ZOMBIE_SCAN_MS = 5000;
/** At most one warn line about them per this long. */
export const ZOMBIE_WARN_EVERY_MS = 60_000;
/** `-w`: lines per second before the rest are summarised. */
export const REAPED_LINES_PER_SECOND = 5;
/** A scan reads at most this many processes' /proc/PID/stat (a bound on its cost). */
export const ZOMBIE_SCAN_LIMIT = 4096;
/** Processes read between two turns of the event loop. */
export const ZOMBIE_SCAN_SLICE = 128;
const TOP_PARENTS = 5;

export interface ZombieReport {
  readonly total: number;
  /** Parents that leave zombies unreaped, most first. */
  readonly parents: ReadonlyArray<{ pid: number; name: string; zombies: number }>;
  /** Every zombie seen (counted or not): the next scan counts those it sees again. */
  readonly seen: ReadonlySet<number>;
}

/** Zombies whose parent is not denit, by parent, if `before` (the last scan) saw them too. */
export async function scanZombies(
  self: number = Deno.pid,
  pause: () => Promise<void> = () => Promise.resolve(),
  before: ReadonlySet<number> = new Set(),
): Promise<ZombieReport> {
  const byParent = new Map<number, number>();
  const seen = new Set<number>();
  const pids = leftovers(self).slice(0, ZOMBIE_SCAN_LIMIT);
  for (let i = 0; i < pids.length; i++) {
    // In slices: the event loop turns between them, so signals wait a slice, not a scan.
    if (i > 0 && i % ZOMBIE_SCAN_SLICE === 0) await pause();
    const pid = pids[i] ?? 0;
    const info = describeProcess(pid);
    if (info.state !== "Z" || info.ppid === self || info.ppid === 0) continue;
    seen.add(pid);
    if (before.has(pid)) byParent.set(info.ppid, (byParent.get(info.ppid) ?? 0) + 1);
  }
  const total = [...byParent.values()].reduce((sum, count) => sum + count, 0);
  const top = [...byParent].sort((a, b) => b[1] - a[1]).slice(0, TOP_PARENTS);
  const parents = top.map(([pid, zombies]) => ({ pid, name: describeProcess(pid).name, zombies }));
  return { total, parents, seen };
}

/** The warn line for a scan that found zombies. */
export function zombieWarning(report: ZombieReport): string {
  const top = report.parents[0];
  const parents = report.parents.map((p) => `${p.pid} (${p.name}): ${p.zombies}`).join(", ");
  const them = report.total === 1 ? "a zombie" : `${report.total} zombies`;
  return `${them} denit cannot reap: ${parents}; their parent is alive and does not wait for ` +
    `them, so only it can reap them${top === undefined ? "" : ` (fix or restart ${top.name})`}; ` +
    `see README "Zombies denit cannot reap"`;
}

/** `-w`: the lines for reaped processes, rate-limited. */
export class ReapedLog {
  readonly #log: Logger;
  #windowStartMs = 0;
  #shown = 0;
  #suppressed = 0;
  #flushTimer: ReturnType<typeof setTimeout> | null = null;

  constructor(log: Logger) {
    this.#log = log;
  }

  reaped(pid: number, status: ExitStatus, nowMs: number = performance.now()): void {
    if (nowMs - this.#windowStartMs >= 1000) this.#flush(nowMs);
    if (this.#shown < REAPED_LINES_PER_SECOND) {
      this.#shown++;
      const how = status.kind === "exited"
        ? `exited ${status.code}`
        : `killed by ${signalName(status.signo)}${status.coreDumped ? " (core dumped)" : ""}`;
      this.#log.warn("reaped a process that was not the main child", { pid, status: how });
      return;
    }
    this.#suppressed++;
    this.#flushTimer ??= setTimeout(() => {
      this.#flushTimer = null;
      this.#flush(performance.now());
    }, 1000);
  }

  /** Says how many were not listed in the window that ends, and starts a new one. */
  #flush(nowMs: number): void {
    if (this.#suppressed > 0) {
      this.#log.warn(
        `reaped ${this.#suppressed} more processes that were not the main child ` +
          `(more than ${REAPED_LINES_PER_SECOND} a second are counted, not listed)`,
      );
    }
    this.#windowStartMs = nowMs;
    this.#shown = 0;
    this.#suppressed = 0;
  }

  /** At exit: the count of the last window, and no timer left. */
  close(): void {
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    this.#flush(performance.now());
  }
}
