/** Why the child ended: its exit, the OOM killer, denit's SIGKILL, or a signal from outside. */

import { SIGKILL, signalName } from "../common/signals.ts";
import type { ExitStatus } from "../sys/process.ts";
import { formatDuration } from "../common/duration.ts";
import { formatBytes } from "../sys/cgroup.ts";

/** The causes /status and /metrics name. */
export type ExitCause = "exited" | "oom" | "grace" | "timeout" | "forwarded" | "external";

/** What the supervisor knew when the child's status came. */
export interface ExitFacts {
  readonly status: ExitStatus;
  /** denit was stopping the child: for `--timeout`, or with SIGKILL after `--grace`. */
  readonly stoppedBy: "timeout" | "grace" | null;
  /** Signals denit sent the child, each with the signal denit received for it. */
  readonly forwarded: ReadonlyMap<number, number>;
  /** The memory cgroup's oom_kill count rose while the child ran. */
  readonly oomKilled: boolean;
  /** The cgroup's memory limit (bytes), null if none or unknown. */
  readonly memoryLimit: number | null;
  readonly graceMs: number | null;
  readonly timeoutMs: number | null;
}

/** The cause, and a sentence for the log line and the termination message. */
export interface Explanation {
  readonly cause: ExitCause;
  readonly text: string;
}

export function explainExit(facts: ExitFacts): Explanation {
  const { status } = facts;
  if (status.kind === "exited") {
    return { cause: "exited", text: `the child exited with code ${status.code}` };
  }
  const signal = signalName(status.signo);
  const killed = `the child was killed by ${signal}${status.coreDumped ? " (core dumped)" : ""}`;
  if (status.signo === SIGKILL && facts.oomKilled) {
    const limit = facts.memoryLimit === null
      ? "no limit set on the cgroup"
      : `memory limit ${formatBytes(facts.memoryLimit)}`;
    return { cause: "oom", text: `${killed}: the kernel's OOM killer (${limit})` };
  }
  if (facts.stoppedBy === "timeout") {
    const deadline = formatDuration(facts.timeoutMs ?? 0);
    return { cause: "timeout", text: `${killed}: denit's own, its deadline of ${deadline} passed` };
  }
  if (status.signo === SIGKILL && facts.stoppedBy === "grace") {
    const grace = formatDuration(facts.graceMs ?? 0);
    return { cause: "grace", text: `${killed}: denit's own, the grace period of ${grace} ran out` };
  }
  const received = facts.forwarded.get(status.signo);
  if (received !== undefined) {
    const from = received === status.signo ? "" : ` (denit received ${signalName(received)})`;
    return { cause: "forwarded", text: `${killed}: forwarded by denit from outside${from}` };
  }
  const text = `${killed}: not sent by denit (the child, its own kin, or the kernel)`;
  return { cause: "external", text };
}

/** How long the OOM-kill count may still rise for another process reaped after a SIGKILL. */
export const OOM_COUNT_SETTLE_MS = 500;

/** The child's rises of the OOM-kill count: less those that come late for others SIGKILLed. */
export class OomLedger {
  #before: number | null = null;
  /** When each other process killed by SIGKILL was reaped, its rise not yet seen. */
  #unsettled: number[] = [];
  /** When each rise was seen that no reaped process claimed yet (its victim still exiting). */
  #unclaimed: number[] = [];

  /** The count read while the child lives and is not on its way out: none of it is the child's. */
  taken(count: number | null, nowMs: number): void {
    if (count === null) return;
    this.#expire(nowMs);
    const rise = this.#before === null ? 0 : Math.max(0, count - this.#before);
    const claimed = this.#unsettled.splice(0, rise).length;
    for (let i = claimed; i < rise; i++) this.#unclaimed.push(nowMs);
    this.#before = count;
  }

  /** Another process was reaped after a SIGKILL: its rise was seen already, or may still come. */
  otherKilled(nowMs: number): void {
    this.#expire(nowMs);
    if (this.#unclaimed.shift() === undefined) this.#unsettled.push(nowMs);
  }

  /** Whether some reaped process's rise may still come (then the count is read again). */
  unsettled(nowMs: number): boolean {
    this.#expire(nowMs);
    return this.#unsettled.length > 0;
  }

  /** The child died of SIGKILL with the count at `count`: whether the OOM killer's was it. */
  childKilled(count: number | null, nowMs: number): boolean {
    if (count === null || this.#before === null) return false;
    this.#expire(nowMs);
    return count - this.#before > this.#unsettled.length;
  }

  #expire(nowMs: number): void {
    this.#unsettled = this.#unsettled.filter((at) => nowMs - at < OOM_COUNT_SETTLE_MS);
    this.#unclaimed = this.#unclaimed.filter((at) => nowMs - at < OOM_COUNT_SETTLE_MS);
  }
}
