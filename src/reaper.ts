/**
 * The only caller of waitpid: turns wait statuses into events. Nothing else in denit waits for
 * a child, so no status can be taken by someone else (`Deno.Command` is never used).
 */

import { type ExitStatus, reapOne, waitForAny, type WaitResult } from "./libc.ts";

/** What one round of reaping found. */
export type ReapEvent =
  | { kind: "reaped"; pid: number; status: ExitStatus }
  | { kind: "no-children" }
  | { kind: "failed"; errno: number };

/** How many statuses one round collects before yielding to signals and timers. */
export const REAP_BATCH = 512;

function toEvent(result: WaitResult): ReapEvent | null {
  if (result.kind === "none") return null;
  return result;
}

/**
 * One round: waits (on a worker thread, so the event loop stays alive and responsive) until a
 * child terminates, then collects every other terminated child without blocking, up to `limit`.
 * SIGCHLD is not needed: the kernel wakes the waiting thread, and the drain after it covers
 * any number of children that exited together.
 */
export async function reapRound(limit: number = REAP_BATCH): Promise<ReapEvent[]> {
  const events: ReapEvent[] = [];
  const first = toEvent(await waitForAny());
  if (first === null) return events;
  events.push(first);
  while (first.kind === "reaped" && events.length < limit) {
    const next = toEvent(reapOne());
    if (next === null) break;
    events.push(next);
    if (next.kind !== "reaped") break;
  }
  return events;
}
