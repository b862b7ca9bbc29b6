/**
 * The child's memory: the cgroup's limit, oom.group and OOM-kill count, oom_score_adj, and the
 * runtime's idle code pages, dropped under a limit so that the OOM killer does not pick denit.
 */

import { quietDelay } from "../common/delay.ts";
import { errorLine } from "../common/errors.ts";
import type { Logger } from "../common/log.ts";
import { SIGKILL } from "../common/signals.ts";
import type { MemoryFacts } from "../common/snapshot.ts";
import * as cgroups from "../sys/cgroup.ts";
import { dropExecutablePages, trimHeap } from "../sys/memory.ts";
import type { ExitStatus } from "../sys/process.ts";
import { OomLedger } from "./cause.ts";
import { isEnding } from "./leftovers.ts";

/** A run this short ends before its heap is trimmed: a start pays nothing for it. */
const TRIM_AFTER_MS = 100;
/** How often the OOM-kill count is read while a reaped process's rise may still come. */
const OOM_SETTLE_POLL_MS = 10;

/** One per denit: the cgroup is found once, here, and the job service's host is handed it. */
export class MemoryWatch {
  readonly #log: Logger;
  readonly cgroup: cgroups.MemoryCgroup | null = cgroups.findMemoryCgroup();
  /** The counts taken while the child lived: its SIGKILL is an OOM kill only if one rose since. */
  readonly #ledger = new OomLedger();
  #facts: MemoryFacts | null = null;
  #closed = false;

  constructor(log: Logger) {
    this.#log = log;
  }

  /**
   * Takes the OOM-kill count unless `pid` is on its way out: the OOM killer sends SIGKILL before
   * it counts, so a count that holds the child's kill is never taken for another's.
   */
  refresh(pid: number | null): void {
    if (this.cgroup === null) return;
    const count = cgroups.readOomKills(this.cgroup);
    if (pid !== null && isEnding(pid)) return;
    this.#ledger.taken(count, performance.now());
  }

  /** The child runs: its oom_score_adj, /status's facts, the oom.group warning, code pages. */
  childStarted(pid: number, oomScoreAdj: number | null): void {
    if (oomScoreAdj !== null) {
      try {
        Deno.writeTextFileSync(`/proc/${pid}/oom_score_adj`, String(oomScoreAdj));
      } catch (err: unknown) {
        this.#log.warn(`cannot set the child's oom_score_adj to ${oomScoreAdj}; it keeps denit's`, {
          error: errorLine(err, true),
        });
      }
    }
    if (this.cgroup !== null) {
      const oomGroup = cgroups.readOomGroup(this.cgroup);
      this.#facts = Object.freeze({ cgroup: this.cgroup.version, limitBytes: null, oomGroup });
      if (oomGroup === true) {
        this.#log.warn(
          "memory.oom.group is 1: an OOM kill ends every process of this container, denit too, so cause=oom cannot be reported",
          { cgroup: this.cgroup.dir },
        );
      }
    }
    void this.dropCodePages();
    void this.#trimAfterStart();
  }

  /** Once the start is over: what it freed, which glibc keeps (0.3-0.5 MiB), back to the kernel. */
  async #trimAfterStart(): Promise<void> {
    await quietDelay(TRIM_AFTER_MS);
    if (this.#closed || !await trimHeap()) return;
    this.#log.debug("gave the start's freed heap back (malloc_trim)");
  }

  /** For /status: the cgroup's version and oom.group, and its limit as it is now. */
  facts(): MemoryFacts | null {
    return this.#facts === null ? null : { ...this.#facts, limitBytes: this.#limit() };
  }

  /** The limit as it is now (an in-place resize changes it); null: none. */
  #limit(): number | null {
    return this.cgroup === null ? null : cgroups.readMemoryLimit(this.cgroup);
  }

  /** Other processes died of SIGKILL: the count is read until their rises can come no more. */
  async otherKilled(count: number, livePid: () => number | null): Promise<void> {
    if (this.cgroup === null) return;
    for (let i = 0; i < count; i++) this.#ledger.otherKilled(performance.now());
    this.refresh(livePid());
    while (!this.#closed && this.#ledger.unsettled(performance.now())) {
      await new Promise((resolve) => setTimeout(resolve, OOM_SETTLE_POLL_MS));
      const pid = livePid();
      if (pid !== null) this.refresh(pid);
    }
  }

  /** Whether the child's end was the OOM killer's, and the limit then (read only for SIGKILL). */
  judge(status: ExitStatus): { oomKilled: boolean; memoryLimit: number | null } {
    const killed = status.kind === "signaled" && status.signo === SIGKILL;
    if (!killed || this.cgroup === null) return { oomKilled: false, memoryLimit: null };
    const oomKilled = this.#ledger.childKilled(
      cgroups.readOomKills(this.cgroup),
      performance.now(),
    );
    return { oomKilled, memoryLimit: oomKilled ? this.#limit() : null };
  }

  /** Drops the runtime's idle code pages under a memory limit; `urgent`: even without one. */
  async dropCodePages(urgent = false): Promise<void> {
    // Without a memory limit there is no OOM killer's choice to steer.
    if (this.#closed || !(urgent || this.#limit() !== null)) return;
    try {
      const mappings = await dropExecutablePages();
      this.#log.debug("dropped the runtime's idle code pages", { mappings });
    } catch (err: unknown) {
      // Only memory stays as it was: nothing else depends on it.
      this.#log.debug("cannot drop code pages", { error: errorLine(err, true) });
    }
  }

  close(): void {
    this.#closed = true;
  }
}
