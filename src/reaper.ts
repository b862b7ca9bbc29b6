/**
 * The only caller of waitpid: turns wait statuses into rounds of reaping. Nothing else in denit
 * waits for a child, so no status can be taken by someone else (`Deno.Command` is never used).
 */

import { Errno, type ExitStatus, lastDrainedStatus, reapNext, waitForAny } from "./libc.ts";

/** What one round of reaping found. */
export interface ReapRound {
  /** Processes reaped in this round, the main child included. */
  reaped: number;
  /** The main child's status, if it was among them. */
  child: ExitStatus | null;
  /** No child at all was left when the round ended. */
  noChildren: boolean;
  /** An unexpected waitpid errno (0: none). */
  errno: number;
}

/** How many statuses one round collects before yielding to signals and timers. */
export const REAP_BATCH = 512;
/** A round that reaped at least this many means a burst: the next one pauses, then drains. */
const BURST = 2;
/** The pause: lets a burst's zombies pile up and be collected in one sweep. */
const BURST_PAUSE_MS = 1;

/**
 * One round: waits (on a worker thread, so the event loop stays alive and responsive) until a
 * child terminates, then collects every other terminated child without blocking, up to `limit`,
 * without allocating per child. SIGCHLD is not needed: the kernel wakes the waiting thread, and
 * the drain after it covers any number of children that exited together.
 */
export async function reapRound(
  childPid: number,
  previous: number,
  limit: number = REAP_BATCH,
): Promise<ReapRound> {
  const round: ReapRound = { reaped: 0, child: null, noChildren: false, errno: 0 };
  if (previous >= BURST) {
    // In a burst, waking a thread per zombie (or two) costs more CPU than the exiting
    // processes themselves get: pause one timer tick and sweep everything that piled up.
    // A full round means more are waiting: no pause, only a turn of the event loop.
    await new Promise((resolve) => setTimeout(resolve, previous >= limit ? 0 : BURST_PAUSE_MS));
    drain(round, childPid, limit);
    if (round.reaped > 0 || round.noChildren || round.errno !== 0) return round;
  }
  const first = await waitForAny();
  if (first.kind === "reaped") {
    round.reaped++;
    if (first.pid === childPid) round.child = first.status;
  } else if (first.kind === "no-children") {
    round.noChildren = true;
    return round;
  } else if (first.kind === "failed") {
    round.errno = first.errno;
    return round;
  } else {
    return round; // Woken without a status (EINTR): the next round waits again.
  }
  drain(round, childPid, limit);
  return round;
}

/** Collects terminated children without blocking into `round`, up to `limit`. */
function drain(round: ReapRound, childPid: number, limit: number): void {
  while (round.reaped < limit) {
    const pid = reapNext();
    if (pid === 0) break;
    if (pid > 0) {
      round.reaped++;
      if (pid === childPid) round.child = lastDrainedStatus();
      continue;
    }
    // waitpid(2): ECHILD means the caller has no children left, waited-for or not.
    if (pid === -Errno.ECHILD) round.noChildren = true;
    else round.errno = -pid;
    break;
  }
}
