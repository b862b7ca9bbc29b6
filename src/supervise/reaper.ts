/**
 * The only waiter for children: turns wait statuses into rounds of reaping. Nothing else in
 * denit waits for a child, so no status can be taken by someone else (`Deno.Command` is never
 * used: its own waitpid would race with this one).
 *
 * A round blocks a worker thread until some child has terminated, without reaping it
 * (waitid with WNOWAIT), then reaps on the JS thread with waitpid(WNOHANG). Reaping and
 * signalling both happen on the JS thread, so a pid denit signals is never one it has already
 * reaped (and the kernel may have reused); see waitForExited() in sys/process.ts.
 */

import {
  Errno,
  type ExitStatus,
  lastReapedSignal,
  lastReapedStatus,
  reapNext,
  type Waited,
  waitForExited,
} from "../sys/process.ts";
import { SIGKILL } from "../common/signals.ts";

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
  /** Other processes reaped in this round that SIGKILL ended (perhaps the OOM killer). */
  othersKilled: number;
}

/**
 * How many statuses one round collects before the event loop turns again (signals, timers and
 * health requests wait that long): about 2 µs each, so a round stays well under a millisecond.
 * The next round's wait returns at once while zombies remain, so a burst drains at full speed.
 */
export const REAP_BATCH = 128;

/**
 * In a burst, the next round's thread wait is started once a round has reaped this many: it
 * returns at once while zombies remain, so by the time the round yields its answer is already
 * in and the event loop turns without the JS thread sleeping on the worker thread's wake-up.
 */
const PREFETCH_AFTER = REAP_BATCH / 2;

/** The next round's wait, started by a round that found a burst. */
let prefetched: Promise<Waited> | null = null;

/** A reaped process that was not the main child (collected for `-w` only). */
export interface Reaped {
  readonly pid: number;
  readonly status: ExitStatus;
}

/**
 * One round: waits until a child has terminated, then reaps up to `limit` of them; with
 * `others`, the pid and status of every one that was not the main child go there.
 */
export async function reapRound(
  childPid: number,
  limit: number = REAP_BATCH,
  others: Reaped[] | null = null,
): Promise<ReapRound> {
  const round: ReapRound = { reaped: 0, child: null, noChildren: false, errno: 0, othersKilled: 0 };
  const waited = await (prefetched ?? waitForExited());
  prefetched = null;
  if (waited === "no-children") {
    round.noChildren = true;
    return round;
  }
  while (round.reaped < limit) {
    if (round.reaped === PREFETCH_AFTER && limit > PREFETCH_AFTER) {
      // Never rejects: a failed wait is only a round that finds nothing and waits again.
      prefetched = waitForExited().catch((): Waited => "interrupted");
    }
    const pid = reapNext();
    if (pid === 0) break;
    if (pid > 0) {
      round.reaped++;
      if (pid === childPid) {
        round.child = lastReapedStatus();
        continue;
      }
      if (lastReapedSignal() === SIGKILL) round.othersKilled++;
      others?.push({ pid, status: lastReapedStatus() });
      continue;
    }
    // waitpid(2): ECHILD means the caller has no children left, waited-for or not.
    if (pid === -Errno.ECHILD) round.noChildren = true;
    else if (pid !== -Errno.EINTR) round.errno = -pid;
    break;
  }
  return round;
}
