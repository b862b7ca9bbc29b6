/**
 * The signal policy: one row per signal 1..31, what denit does with it, and why; 34..64 are
 * forwarded. The launcher applies it before the runtime starts: what is forwarded, and SIGCHLD,
 * is blocked and read from a signalfd; what is ignored is SIG_IGN.
 */

import { SIGCHLD, type SignalName, signalNumber, SIGRTMAX, SIGRTMIN } from "../common/signals.ts";

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

/** One row, frozen. */
function policy(name: SignalName, action: SignalAction, why: string): SignalPolicy {
  return Object.freeze({ name, signo: signalNumber(name), action, why });
}

/** The policy table. */
export const SIGNAL_TABLE: readonly SignalPolicy[] = Object.freeze([
  policy("SIGHUP", "forward", "reload or hang-up request for the app"),
  policy("SIGINT", "forward", "stop request (Ctrl-C, docker kill)"),
  policy("SIGQUIT", "forward", "stop request (graceful stop for nginx)"),
  policy("SIGILL", "never", CRASH),
  policy("SIGTRAP", "never", CRASH),
  policy("SIGABRT", "never", CRASH),
  policy("SIGBUS", "never", CRASH),
  policy("SIGFPE", "never", CRASH),
  policy("SIGKILL", "never", "cannot be caught"),
  policy("SIGUSR1", "forward", "application-defined"),
  policy("SIGSEGV", "never", CRASH),
  policy("SIGUSR2", "forward", "application-defined"),
  policy(
    "SIGPIPE",
    "ignore",
    "raised by denit's own write to a closed stderr pipe, never a request for the child",
  ),
  policy("SIGALRM", "forward", "application-defined timer"),
  policy("SIGTERM", "forward", "the stop request of docker and kubelet"),
  policy("SIGSTKFLT", "forward", "unused by the kernel; pass it on"),
  policy("SIGCHLD", "never", "denit's own child notification"),
  policy("SIGCONT", "forward", "resume a stopped child"),
  policy("SIGSTOP", "never", "cannot be caught"),
  policy("SIGTSTP", "forward", "stop request for the child's job"),
  policy(
    "SIGTTIN",
    "ignore",
    "background-read stop; ignored so that denit is never stopped by its terminal",
  ),
  policy("SIGTTOU", "ignore", "background-write stop; ignored so that tcsetpgrp never stops denit"),
  policy("SIGURG", "forward", "application-defined (out-of-band data)"),
  policy("SIGXCPU", "forward", "CPU limit notice meant for the app"),
  policy("SIGXFSZ", "forward", "file size limit notice for the app"),
  policy("SIGVTALRM", "forward", "application-defined timer"),
  policy(
    "SIGPROF",
    "ignore",
    "the profiling timer of the process that gets it (V8's sampler uses it in denit)",
  ),
  policy("SIGWINCH", "forward", "terminal resized"),
  policy("SIGIO", "forward", "application-defined (async I/O)"),
  policy("SIGPWR", "forward", "power failure notice"),
  policy("SIGSYS", "never", CRASH),
]);

/** The signals denit forwards: the rows whose action is "forward", and the real-time ones. */
export const FORWARDED: readonly number[] = Object.freeze([
  ...SIGNAL_TABLE.filter((row) => row.action === "forward").map((row) => row.signo),
  ...Array.from({ length: SIGRTMAX - SIGRTMIN + 1 }, (_, i) => SIGRTMIN + i),
]);

/** What the launcher blocked and denit reads: the forwarded signals and SIGCHLD. */
export const READ_SIGNALS: readonly number[] = Object.freeze([...FORWARDED, SIGCHLD]);
