/**
 * The only waiter for children (never `Deno.Command`): a round of reaping after a SIGCHLD, on
 * the thread that signals, so a pid denit signals is never one it reaped already.
 */

import * as proc from "../sys/process.ts";
import { SIGKILL } from "../common/signals.ts";

/** What one round of reaping found. */
export interface ReapRound {
  reaped: number;
  child: proc.ExitStatus | null;
  /** No child at all was left when the round ended. */
  noChildren: boolean;
  /** The round stopped at its limit: more may be waiting. */
  more: boolean;
  /** An unexpected waitpid errno (0: none). */
  errno: number;
  /** Other processes reaped in this round that SIGKILL ended (perhaps the OOM killer). */
  othersKilled: number;
}

/** Statuses one round collects before the event loop turns again. */
export const REAP_BATCH = 128;

/** A reaped process that was not the main child (collected for `-w` and the jobs only). */
export interface Reaped {
  readonly pid: number;
  readonly status: proc.ExitStatus;
}

/** Reaps up to `limit` without waiting; `others` gets the pid and status of all but the child. */
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
    const pid = proc.reapNext();
    if (pid === 0) return round;
    if (pid > 0) {
      round.reaped++;
      if (pid === childPid) {
        round.child = proc.lastReapedStatus();
        continue;
      }
      if (proc.lastReapedSignal() === SIGKILL) round.othersKilled++;
      others?.push({ pid, status: proc.lastReapedStatus() });
      continue;
    }
    // waitpid(2): ECHILD means the caller has no children left, waited-for or not.
    if (pid === -proc.Errno.ECHILD) round.noChildren = true;
    else if (pid === -proc.Errno.EINTR) round.more = true;
    else round.errno = -pid;
    return round;
  }
  round.more = true;
  return round;
}
