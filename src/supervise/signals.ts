/**
 * The signal policy: one row per Linux signal 1..31, what denit does when it receives it, and
 * why. Real-time signals (34..64) have no row: Deno cannot listen for them, so denit ignores
 * them (a subreaper would otherwise die of one) and the child starts with them at default.
 */

import { type SignalName, signalNumber } from "../common/signals.ts";

/** What denit does with a signal it receives. */
export type SignalAction = "forward" | "ignore" | "never";

/** One row of the policy table. */
export interface SignalPolicy {
  readonly name: SignalName;
  readonly signo: number;
  readonly action: SignalAction;
  readonly why: string;
}

const CRASH = "a crash signal the kernel raises in denit itself; forwarding it would be a lie";

const ROWS: ReadonlyArray<readonly [SignalName, SignalAction, string]> = [
  ["SIGHUP", "forward", "reload or hang-up request for the app"],
  ["SIGINT", "forward", "stop request (Ctrl-C, docker kill)"],
  ["SIGQUIT", "forward", "stop request (graceful stop for nginx)"],
  ["SIGILL", "never", CRASH],
  ["SIGTRAP", "never", CRASH],
  ["SIGABRT", "never", CRASH],
  ["SIGBUS", "never", CRASH],
  ["SIGFPE", "never", CRASH],
  ["SIGKILL", "never", "cannot be caught"],
  ["SIGUSR1", "forward", "application-defined"],
  ["SIGSEGV", "never", CRASH],
  ["SIGUSR2", "forward", "application-defined"],
  [
    "SIGPIPE",
    "ignore",
    "raised by denit's own write to a closed stderr pipe, never a request for the child",
  ],
  ["SIGALRM", "forward", "application-defined timer"],
  ["SIGTERM", "forward", "the stop request of docker and kubelet"],
  ["SIGSTKFLT", "forward", "unused by the kernel; pass it on"],
  ["SIGCHLD", "never", "denit's own child notification"],
  ["SIGCONT", "forward", "resume a stopped child"],
  ["SIGSTOP", "never", "cannot be caught"],
  ["SIGTSTP", "forward", "stop request for the child's job"],
  [
    "SIGTTIN",
    "ignore",
    "background-read stop; ignored so that denit is never stopped by its terminal",
  ],
  ["SIGTTOU", "ignore", "background-write stop; ignored so that tcsetpgrp never stops denit"],
  ["SIGURG", "forward", "application-defined (out-of-band data)"],
  ["SIGXCPU", "forward", "CPU limit notice meant for the app"],
  ["SIGXFSZ", "forward", "file size limit notice for the app"],
  ["SIGVTALRM", "forward", "application-defined timer"],
  [
    "SIGPROF",
    "ignore",
    "the profiling timer of the process that gets it (V8's sampler uses it in denit)",
  ],
  ["SIGWINCH", "forward", "terminal resized"],
  ["SIGIO", "forward", "application-defined (async I/O)"],
  ["SIGPWR", "forward", "power failure notice"],
  ["SIGSYS", "never", CRASH],
];

/** The policy table. */
export const SIGNAL_TABLE: readonly SignalPolicy[] = Object.freeze(
  ROWS.map(([name, action, why]) =>
    Object.freeze({ name, signo: signalNumber(name), action, why })
  ),
);

/** Signals that ask the child to stop: they start `--grace` and flip readiness. */
export const STOP_SIGNALS: ReadonlySet<number> = new Set(
  (["SIGINT", "SIGQUIT", "SIGTERM"] as const).map(signalNumber),
);

/** The rows whose action is "forward". */
export const FORWARDED: readonly SignalPolicy[] = SIGNAL_TABLE.filter((row) =>
  row.action === "forward"
);
