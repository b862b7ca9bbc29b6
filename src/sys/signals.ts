/** Signals read from a signalfd (the launcher blocked them), polled on a runtime thread. */

import { POLLFD, SIGNALFD_SIGINFO, SIGSET_BYTES } from "./layout.ts";
import { closeFd, Errno, errno, errnoMessage, libc } from "./symbols.ts";

const SFD_NONBLOCK = 0o4000; // sys/signalfd.h (O_NONBLOCK)
const SFD_CLOEXEC = 0o2000000; // sys/signalfd.h (O_CLOEXEC)
const SIG_BLOCK = 0; // bits/sigaction.h
const POLLIN = 0x1; // poll.h
const READ_BATCH = 64;

/** sigset_t, a bit array (bit N-1 for signal N), holding `signos`. */
export function signalSet(signos: Iterable<number>): Uint8Array<ArrayBuffer> {
  const set = new Uint8Array(SIGSET_BYTES);
  for (const signo of signos) {
    set[(signo - 1) >> 3] = (set[(signo - 1) >> 3] ?? 0) | (1 << ((signo - 1) & 7));
  }
  return set;
}

/** The signals blocked in the calling thread (pthread_sigmask(SIG_BLOCK, NULL, &old)). */
export function blockedSignals(): Set<number> {
  const set = new Uint8Array(SIGSET_BYTES);
  libc.pthread_sigmask(SIG_BLOCK, null, set);
  const blocked = new Set<number>();
  for (let signo = 1; signo <= 64; signo++) {
    if (((set[(signo - 1) >> 3] ?? 0) & (1 << ((signo - 1) & 7))) !== 0) blocked.add(signo);
  }
  return blocked;
}

/** Of `signos`, those this thread cannot block (qemu-user keeps two real-time ones for itself). */
export function unblockable(signos: readonly number[]): number[] {
  libc.pthread_sigmask(SIG_BLOCK, signalSet(signos), null);
  const blocked = blockedSignals();
  return signos.filter((signo) => !blocked.has(signo));
}

/** A struct pollfd for POLLIN on `fd`, over V8's 64-byte on-heap limit: another thread reads it. */
export function pollIn(fd: number): Uint8Array<ArrayBuffer> {
  const pollfd = new Uint8Array(128);
  const view = new DataView(pollfd.buffer);
  view.setInt32(POLLFD.fd, fd, true);
  view.setInt16(POLLFD.events, POLLIN, true);
  return pollfd;
}

function ignore(): void {}

/**
 * Makes the runtime start its signal thread now (a first listener does; else it starts it about
 * half a second in), before a child can take the last task of a pids limit: the runtime exits
 * when it cannot start a thread.
 */
export function startSignalThread(): void {
  Deno.addSignalListener("SIGUSR1", ignore);
  Deno.removeSignalListener("SIGUSR1", ignore);
}

export class SignalReader {
  readonly #fd: number;
  readonly #pollfd: Uint8Array<ArrayBuffer>;
  readonly #buffer = new Uint8Array(SIGNALFD_SIGINFO.bytes * READ_BATCH);
  readonly #view = new DataView(this.#buffer.buffer);

  /** Opens a signalfd, the runtime's signal thread started first. */
  constructor(signos: Iterable<number>) {
    startSignalThread();
    this.#fd = libc.signalfd(-1, signalSet(signos), SFD_NONBLOCK | SFD_CLOEXEC);
    if (this.#fd < 0) throw new Error(`signalfd: ${errnoMessage(errno())}`);
    this.#pollfd = pollIn(this.#fd);
  }

  /** Resolves once a signal is pending, or after `timeoutMs` (-1: never; 0: a turn of the loop). */
  async wait(timeoutMs = -1): Promise<void> {
    await libc.poll(this.#pollfd, 1n, timeoutMs);
  }

  /** Every pending signal, in the order the kernel hands them over (lowest number first). */
  take(): number[] {
    const signos: number[] = [];
    for (;;) {
      const n = Number(libc.read(this.#fd, this.#buffer, BigInt(this.#buffer.length)));
      if (n < 0 && errno() === Errno.EINTR) continue;
      for (let at = 0; at + SIGNALFD_SIGINFO.bytes <= n; at += SIGNALFD_SIGINFO.bytes) {
        signos.push(this.#view.getUint32(at + SIGNALFD_SIGINFO.signo, true));
      }
      // A short read took all there was; EAGAIN means nothing (more) is pending.
      if (n < this.#buffer.length) return signos;
    }
  }

  close(): void {
    closeFd(this.#fd);
  }
}
