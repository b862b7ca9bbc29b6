/**
 * The only waiter for children: a round of reaping, run when a SIGCHLD was read (supervisor.ts).
 * Nothing else in denit waits for a child, so no status can be taken by someone else
 * (`Deno.Command` is never used: its own waitpid would race with this one). Reaping and
 * signalling both happen on the JS thread, so a pid denit signals is never one it has already
 * reaped (and the kernel may have reused), as in tini and catatonit.
 */

import {
  Errno,
  type ExitStatus,
  lastReapedSignal,
  lastReapedStatus,
  reapNext,
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
  /** The round stopped at its limit: more may be waiting. */
  more: boolean;
  /** An unexpected waitpid errno (0: none). */
  errno: number;
  /** Other processes reaped in this round that SIGKILL ended (perhaps the OOM killer). */
  othersKilled: number;
}

/**
 * How many statuses one round collects before the event loop turns again (signals, timers and
 * health requests wait that long): each is cheap, so a round stays short.
 */
export const REAP_BATCH = 128;

/** A reaped process that was not the main child (collected for `-w` and the jobs only). */
export interface Reaped {
  readonly pid: number;
  readonly status: ExitStatus;
}

/**
 * One round: reaps what has terminated, up to `limit`, without waiting; with `others`, the pid
 * and status of every one that was not the main child go there.
 */
export function reapRound(
  childPid: number,
  limit: number = REAP_BATCH,
  others: Reaped[] | null = null,
): ReapRound {
  const round: ReapRound = {
    reaped: 0,
    child: null,
    noChildren: false,
    more: false,
    errno: 0,
    othersKilled: 0,
  };
  while (round.reaped < limit) {
    const pid = reapNext();
    if (pid === 0) return round;
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
    else if (pid === -Errno.EINTR) round.more = true;
    else round.errno = -pid;
    return round;
  }
  round.more = true;
  return round;
}
