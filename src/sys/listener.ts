/**
 * The job socket, held by denit for its whole run, bound 0600 before anyone can connect and
 * handed to each job service; a connection made while none runs waits in the backlog.
 */

import { SOCKET, unixAddress } from "./layout.ts";
import { pollIn } from "./signals.ts";
import { closeFd, errno, errnoMessage, libc } from "./symbols.ts";

/** Connections that may wait to be accepted (Node's default for a server). */
const BACKLOG = 511;

/** Whether a connection waits on the listening socket `fd`, polled on a runtime thread. */
async function waiting(fd: number, timeoutMs: number): Promise<boolean> {
  const pollfd = pollIn(fd);
  const ready = await libc.poll(pollfd, 1n, timeoutMs) > 0;
  void pollfd; // referenced until poll has returned: the other thread writes revents into it
  return ready;
}

/** Whether a connection waits to be accepted on the listening socket `fd` now (no wait). */
export function connectionWaiting(fd: number): Promise<boolean> {
  return waiting(fd, 0);
}

export class UnixListener {
  readonly fd: number;
  #closed = false;

  private constructor(fd: number) {
    this.fd = fd;
  }

  /** Binds `path`, makes it 0600 (only its owner may connect), listens; throws naming the call. */
  static bind(path: string): UnixListener {
    const address = unixAddress(new TextEncoder().encode(path), false);
    const fd = libc.socket(SOCKET.AF_UNIX, SOCKET.STREAM | SOCKET.CLOEXEC, 0);
    if (fd < 0) throw new Error(`socket: ${errnoMessage(errno())}`);
    try {
      if (libc.bind(fd, address, address.length) !== 0) {
        throw new Error(`bind: ${errnoMessage(errno())}`);
      }
      // Before listen: until then a connect is refused, so nobody connects under another mode.
      Deno.chmodSync(path, 0o600);
      if (libc.listen(fd, BACKLOG) !== 0) throw new Error(`listen: ${errnoMessage(errno())}`);
    } catch (err: unknown) {
      closeFd(fd);
      throw err;
    }
    return new UnixListener(fd);
  }

  /** Resolves true once a connection waits (polled on a runtime thread), false once closed. */
  async connectionWaits(): Promise<boolean> {
    while (!this.#closed) {
      const ready = await waiting(this.fd, -1);
      if (this.#closed) return false;
      if (ready) return true;
    }
    return false;
  }

  /** Closes the socket: a wait under way ends with false (shutdown(2) wakes it first). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    libc.shutdown(this.fd, SOCKET.SHUT_RDWR);
    closeFd(this.fd);
  }
}
