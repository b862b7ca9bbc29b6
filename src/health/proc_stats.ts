/** This process's resource figures from /proc/self, for the `process_*` metrics. */
import { readProcStat } from "../common/proc.ts";

/** The Prometheus client conventions' process figures. */
export type ProcessStats = Readonly<ReturnType<typeof readProcessStats>>;

// sysconf(_SC_CLK_TCK) is 100 on every Linux architecture denit supports.
const CLOCK_TICKS = 100;

function statusKilobytes(status: string, field: string): number {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, "m").exec(status);
  return match === null ? 0 : Number(match[1]);
}

/** How long figures are reused: they cost several reads of /proc; a scrape comes every 15 s. */
const CACHE_MS = 1000;

/** The figures, read at most once a second: a flood of /metrics requests reads /proc once. */
export class ProcessStatsCache {
  #cached: { atMs: number; stats: ProcessStats } | null = null;

  get(nowMs: number = performance.now()): ProcessStats {
    if (this.#cached === null || nowMs - this.#cached.atMs >= CACHE_MS) {
      this.#cached = { atMs: nowMs, stats: readProcessStats() };
    }
    return this.#cached.stats;
  }
}

/** Reads the figures now; any that /proc does not give reads as 0. */
function readProcessStats() {
  const status = Deno.readTextFileSync("/proc/self/status");
  const stat = readProcStat("self");
  // proc(5): utime is field 14, stime 15, starttime 22.
  const ticks = (n: number) => Number(stat.field(n));
  const limit = /^Max open files\s+(\d+)/m.exec(Deno.readTextFileSync("/proc/self/limits"));
  const boot = /^btime (\d+)$/m.exec(Deno.readTextFileSync("/proc/stat"));
  let openFds = 0;
  for (const _ of Deno.readDirSync("/proc/self/fd")) openFds++;
  return {
    residentBytes: statusKilobytes(status, "VmRSS") * 1024,
    virtualBytes: statusKilobytes(status, "VmSize") * 1024,
    startTimeSeconds: Number(boot?.[1] ?? 0) + ticks(22) / CLOCK_TICKS,
    cpuSecondsTotal: (ticks(14) + ticks(15)) / CLOCK_TICKS,
    // Listing the directory opens one descriptor of its own.
    openFds: Math.max(openFds - 1, 0),
    maxFds: limit === null ? 0 : Number(limit[1]),
  };
}
