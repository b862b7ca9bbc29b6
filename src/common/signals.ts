/** Linux signal names and numbers (x86_64 and aarch64 share them), parsed and printed. */

/** Signals 1..31 by number: index N-1 holds signal N's name. */
export const SIGNAL_NAMES = Object.freeze(
  [
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
  ] as const satisfies readonly Deno.Signal[],
);

/** A name of SIGNAL_NAMES. */
export type SignalName = typeof SIGNAL_NAMES[number];

/** The stop requests (docker, Ctrl-C, nginx's QUIT): each starts --grace and --shutdown-delay. */
export const STOP_SIGNALS: readonly SignalName[] = ["SIGTERM", "SIGINT", "SIGQUIT"];

/** SIGKILL's number. */
export const SIGKILL = 9;
/** SIGTERM's number. */
export const SIGTERM = 15;
/** SIGCHLD's number. */
export const SIGCHLD = 17;
/** The first real-time signal the C library leaves to programs (glibc's SIGRTMIN). */
export const SIGRTMIN = 34;
/** The last real-time signal. */
export const SIGRTMAX = 64;

/** The number of a signal name. */
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
