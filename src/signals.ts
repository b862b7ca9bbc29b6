/**
 * The signal policy: one row per Linux signal (x86_64 and aarch64 share this numbering), what
 * denit does when it receives it, and why.
 */

/** What denit does with a signal it receives. */
export type SignalAction = "forward" | "ignore" | "never";

/** One row of the policy table. */
export interface SignalPolicy {
  readonly name: Deno.Signal;
  readonly signo: number;
  readonly action: SignalAction;
  readonly why: string;
}

const CRASH = "a crash signal the kernel raises in denit itself; forwarding it would be a lie";

/** The policy table. */
export const SIGNAL_TABLE: readonly SignalPolicy[] = Object.freeze([
  { name: "SIGHUP", signo: 1, action: "forward", why: "reload or hang-up request for the app" },
  { name: "SIGINT", signo: 2, action: "forward", why: "stop request (Ctrl-C, docker kill)" },
  { name: "SIGQUIT", signo: 3, action: "forward", why: "stop request (graceful stop for nginx)" },
  { name: "SIGILL", signo: 4, action: "never", why: CRASH },
  { name: "SIGTRAP", signo: 5, action: "never", why: CRASH },
  { name: "SIGABRT", signo: 6, action: "never", why: CRASH },
  { name: "SIGBUS", signo: 7, action: "never", why: CRASH },
  { name: "SIGFPE", signo: 8, action: "never", why: CRASH },
  { name: "SIGKILL", signo: 9, action: "never", why: "cannot be caught" },
  { name: "SIGUSR1", signo: 10, action: "forward", why: "application-defined" },
  { name: "SIGSEGV", signo: 11, action: "never", why: CRASH },
  { name: "SIGUSR2", signo: 12, action: "forward", why: "application-defined" },
  {
    name: "SIGPIPE",
    signo: 13,
    action: "ignore",
    why: "raised by denit's own write to a closed stderr pipe, never a request for the child",
  },
  { name: "SIGALRM", signo: 14, action: "forward", why: "application-defined timer" },
  { name: "SIGTERM", signo: 15, action: "forward", why: "the stop request of docker and kubelet" },
  { name: "SIGSTKFLT", signo: 16, action: "forward", why: "unused by the kernel; pass it on" },
  { name: "SIGCHLD", signo: 17, action: "never", why: "denit's own child notification" },
  { name: "SIGCONT", signo: 18, action: "forward", why: "resume a stopped child" },
  { name: "SIGSTOP", signo: 19, action: "never", why: "cannot be caught" },
  { name: "SIGTSTP", signo: 20, action: "forward", why: "stop request for the child's job" },
  {
    name: "SIGTTIN",
    signo: 21,
    action: "ignore",
    why: "background-read stop; ignored so that denit is never stopped by its terminal",
  },
  {
    name: "SIGTTOU",
    signo: 22,
    action: "ignore",
    why: "background-write stop; ignored so that tcsetpgrp never stops denit",
  },
  { name: "SIGURG", signo: 23, action: "forward", why: "application-defined (out-of-band data)" },
  { name: "SIGXCPU", signo: 24, action: "forward", why: "CPU limit notice meant for the app" },
  { name: "SIGXFSZ", signo: 25, action: "forward", why: "file size limit notice for the app" },
  { name: "SIGVTALRM", signo: 26, action: "forward", why: "application-defined timer" },
  {
    name: "SIGPROF",
    signo: 27,
    action: "ignore",
    why: "the profiling timer of the process that gets it (V8's sampler uses it in denit)",
  },
  { name: "SIGWINCH", signo: 28, action: "forward", why: "terminal resized" },
  { name: "SIGIO", signo: 29, action: "forward", why: "application-defined (async I/O)" },
  { name: "SIGPWR", signo: 30, action: "forward", why: "power failure notice" },
  { name: "SIGSYS", signo: 31, action: "never", why: CRASH },
]);

const BY_NAME = new Map<string, SignalPolicy>(SIGNAL_TABLE.map((row) => [row.name, row]));
const BY_NUMBER = new Map<number, SignalPolicy>(SIGNAL_TABLE.map((row) => [row.signo, row]));

/** SIGKILL's number, the escalation signal. */
export const SIGKILL = 9;
/** SIGTERM's number, the polite request to leftover processes. */
export const SIGTERM = 15;

/** Signals that ask the child to stop: they start `--grace` and flip readiness. */
export const STOP_SIGNALS: ReadonlySet<number> = new Set([2, 3, 15]);

/** The rows whose action is "forward". */
export const FORWARDED: readonly SignalPolicy[] = SIGNAL_TABLE.filter((row) =>
  row.action === "forward"
);

/** "SIGTERM" for 15; "SIG34" style for numbers outside the table. */
export function signalName(signo: number): string {
  return BY_NUMBER.get(signo)?.name ?? `SIG${signo}`;
}

/**
 * Parses "TERM", "SIGTERM", "sigterm" or "15" to a signal number (1..64).
 * Throws RangeError with a one-line message otherwise.
 */
export function parseSignal(text: string): number {
  const trimmed = text.trim();
  if (/^\d+$/.test(trimmed)) {
    const signo = Number(trimmed);
    if (signo >= 1 && signo <= 64) return signo;
    throw new RangeError(`Invalid signal "${text}": numbers go from 1 to 64`);
  }
  const upper = trimmed.toUpperCase();
  const row = BY_NAME.get(upper.startsWith("SIG") ? upper : `SIG${upper}`);
  if (row === undefined) throw new RangeError(`Invalid signal "${text}": unknown name`);
  return row.signo;
}
