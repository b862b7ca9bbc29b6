/**
 * Linux signals (x86_64 and aarch64 share them), and the policy, one row per signal 1..31 (34..64
 * are forwarded), which the launcher applies before the runtime starts (blocked, or SIG_IGN).
 */

/** What denit does with a signal it receives. */
export type SignalAction = "forward" | "ignore" | "never";

const CRASH = "a crash signal the kernel raises in denit itself; forwarding it would be a lie";

/** Signals 1..31 in order: name, action, why. */
const ROWS = [
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
  ["SIGPIPE", "ignore", "denit's own write to a closed stderr pipe; never a request for the child"],
  ["SIGALRM", "forward", "application-defined timer"],
  ["SIGTERM", "forward", "the stop request of docker and kubelet"],
  ["SIGSTKFLT", "forward", "unused by the kernel; pass it on"],
  ["SIGCHLD", "never", "denit's own child notification"],
  ["SIGCONT", "forward", "resume a stopped child"],
  ["SIGSTOP", "never", "cannot be caught"],
  ["SIGTSTP", "forward", "stop request for the child's job"],
  ["SIGTTIN", "ignore", "background-read stop; ignored so that its terminal never stops denit"],
  ["SIGTTOU", "ignore", "background-write stop; ignored so that tcsetpgrp never stops denit"],
  ["SIGURG", "forward", "application-defined (out-of-band data)"],
  ["SIGXCPU", "forward", "CPU limit notice meant for the app"],
  ["SIGXFSZ", "forward", "file size limit notice for the app"],
  ["SIGVTALRM", "forward", "application-defined timer"],
  ["SIGPROF", "ignore", "the profiling timer of whoever gets it (V8's sampler uses it in denit)"],
  ["SIGWINCH", "forward", "terminal resized"],
  ["SIGIO", "forward", "application-defined (async I/O)"],
  ["SIGPWR", "forward", "power failure notice"],
  ["SIGSYS", "never", CRASH],
] as const satisfies ReadonlyArray<readonly [Deno.Signal, SignalAction, string]>;

/** Signals 1..31 by number: index N-1 holds signal N's name. */
export const SIGNAL_NAMES = Object.freeze(ROWS.map(([name]) => name));

export type SignalName = typeof ROWS[number][0];

/** The policy by row: name, number, action and why. */
export const SIGNAL_TABLE = Object.freeze(
  ROWS.map(([name, action, why], i) => Object.freeze({ name, signo: i + 1, action, why })),
);

/** The stop requests (docker, Ctrl-C, nginx's QUIT): each starts --grace and --shutdown-delay. */
export const STOP_SIGNALS: readonly SignalName[] = ["SIGTERM", "SIGINT", "SIGQUIT"];

export const SIGKILL = 9;
export const SIGTERM = 15;
export const SIGCHLD = 17;
/** The first real-time signal the C library leaves to programs (glibc's SIGRTMIN). */
export const SIGRTMIN = 34;
/** The last real-time signal. */
export const SIGRTMAX = 64;

export function signalNumber(name: SignalName): number {
  return SIGNAL_NAMES.indexOf(name) + 1;
}

/** "SIGTERM" for 15; "SIGRTMIN+N" for real-time signals; "SIG32" style otherwise. */
export function signalName(signo: number): string {
  const name = SIGNAL_NAMES[signo - 1];
  if (name !== undefined) return name;
  if (signo >= SIGRTMIN && signo <= SIGRTMAX) return `SIGRTMIN+${signo - SIGRTMIN}`;
  return `SIG${signo}`;
}

/** "TERM", "SIGTERM", "sigterm" or "15" → a signal number 1..64; else a RangeError. */
export function parseSignal(text: string): number {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) {
    const signo = Number(trimmed);
    if (signo >= 1 && signo <= SIGRTMAX) return signo;
    throw new RangeError(`Invalid signal "${text}": numbers go from 1 to ${SIGRTMAX}`);
  }
  const upper = trimmed.toUpperCase();
  const full = upper.startsWith("SIG") ? upper : `SIG${upper}`;
  const index = SIGNAL_NAMES.findIndex((name) => name === full);
  if (index < 0) throw new RangeError(`Invalid signal "${text}": unknown name`);
  return index + 1;
}

/** The signals denit forwards: the rows whose action is "forward", and the real-time ones. */
export const FORWARDED: readonly number[] = Object.freeze([
  ...SIGNAL_TABLE.filter((row) => row.action === "forward").map((row) => row.signo),
  ...Array.from({ length: SIGRTMAX - SIGRTMIN + 1 }, (_, i) => SIGRTMIN + i),
]);

/** What the launcher blocked and denit reads: the forwarded signals and SIGCHLD. */
export const READ_SIGNALS: readonly number[] = Object.freeze([...FORWARDED, SIGCHLD]);
