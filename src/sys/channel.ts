/**
 * The control channel between denit (PID 1) and the job service's process: a Unix SOCK_SEQPACKET
 * socket pair, so that every message arrives whole and alone, and descriptors travel with it
 * (SCM_RIGHTS: a job's output pipes). Sends and receives wait on threads of the runtime, never
 * on the caller's: a service that stops reading cannot hold denit's thread. Messages are at most
 * MAX_MESSAGE_BYTES; the sender keeps to that.
 */

import { CMSG, IOVEC, MSGHDR, SOCKET } from "./layout.ts";
import { addressOf, errno, libc } from "./symbols.ts";

const { AF_UNIX, SEQPACKET: SOCK_SEQPACKET, CLOEXEC: SOCK_CLOEXEC, SOL_SOCKET } = SOCKET;
const SO_SNDBUF = 7; // asm-generic/socket.h
const SO_RCVBUF = 8; // asm-generic/socket.h
const SCM_RIGHTS = 1; // linux/socket.h
const MSG_NOSIGNAL = 0x4000; // sys/socket.h: a closed peer is EPIPE, not SIGPIPE
const MSG_CMSG_CLOEXEC = 0x40000000; // sys/socket.h: received descriptors are close-on-exec
const EINTR = 4;

/** The largest message: it fits the socket buffers of any kernel's defaults (2 x 212992). */
export const MAX_MESSAGE_BYTES = 192 * 1024;
/** Descriptors one message carries at most. */
const MAX_FDS = 8;
/** The socket buffers asked for (the kernel caps them at net.core.[rw]mem_max). */
const BUFFER_BYTES = 1024 * 1024;

/** A message received: its bytes and the descriptors that came with it (now ours). */
export interface Received {
  readonly data: Uint8Array;
  readonly fds: readonly number[];
}

/** socketpair(2): two connected ends, close-on-exec; throws an Error with errno. */
export function channelPair(): [number, number] {
  const fds = new Int32Array(2);
  if (libc.socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) !== 0) {
    throw new Error(`socketpair failed: errno ${errno()}`);
  }
  const size = new Int32Array([BUFFER_BYTES]);
  for (const fd of fds) {
    libc.setsockopt(fd, SOL_SOCKET, SO_SNDBUF, size, 4);
    libc.setsockopt(fd, SOL_SOCKET, SO_RCVBUF, size, 4);
  }
  return [fds[0] ?? -1, fds[1] ?? -1];
}

/** One end of the channel. */
export class Channel {
  readonly #fd: number;
  /** Sends one after another, in order. */
  #sending: Promise<unknown> = Promise.resolve();
  // Receive buffers, each larger than V8 keeps on its heap: their addresses, written into the
  // header, stay valid while recvmsg runs on another thread.
  readonly #data = new Uint8Array(MAX_MESSAGE_BYTES);
  readonly #block = new Uint8Array(256);
  #closed = false;

  constructor(fd: number) {
    this.#fd = fd;
  }

  /** The descriptor (for the spawn that gives it to the service). */
  get fd(): number {
    return this.#fd;
  }

  /**
   * Sends `data` and `fds` (which stay this process's too: the peer gets copies). Resolves
   * with 0, or -errno (-EPIPE: the peer is gone). In order with earlier sends.
   */
  send(data: Uint8Array, fds: readonly number[] = []): Promise<number> {
    if (data.length > MAX_MESSAGE_BYTES || fds.length > MAX_FDS) {
      return Promise.reject(new RangeError(`message of ${data.length} bytes, ${fds.length} fds`));
    }
    const next = this.#sending.then(() => this.#sendNow(data, fds));
    this.#sending = next.catch(() => {/* reported to that send's caller */});
    return next;
  }

  async #sendNow(data: Uint8Array, fds: readonly number[]): Promise<number> {
    if (this.#closed) return -9; // EBADF
    // One block for the header, the vector, the control data and the message: off V8's heap.
    const block = new Uint8Array(256 + Math.max(data.length, 64));
    const header = new DataView(block.buffer, 0, MSGHDR.bytes);
    const iov = block.subarray(64, 64 + IOVEC.bytes);
    const control = block.subarray(128, 128 + CMSG.data + 8 * MAX_FDS);
    const payload = block.subarray(256, 256 + data.length);
    payload.set(data);
    const vector = new DataView(block.buffer, iov.byteOffset, IOVEC.bytes);
    vector.setBigUint64(IOVEC.base, addressOf(block) + 256n, true);
    vector.setBigUint64(IOVEC.len, BigInt(data.length), true);
    header.setBigUint64(MSGHDR.iov, addressOf(block) + 64n, true);
    header.setBigUint64(MSGHDR.iovlen, 1n, true);
    if (fds.length > 0) {
      // CMSG_LEN(4 n) = 16 + 4 n; CMSG_SPACE rounds that to 8.
      const length = CMSG.data + 4 * fds.length;
      const cmsg = new DataView(block.buffer, control.byteOffset, control.length);
      cmsg.setBigUint64(0, BigInt(length), true);
      cmsg.setInt32(CMSG.level, SOL_SOCKET, true);
      cmsg.setInt32(CMSG.type, SCM_RIGHTS, true);
      fds.forEach((fd, i) => cmsg.setInt32(CMSG.data + 4 * i, fd, true));
      header.setBigUint64(MSGHDR.control, addressOf(block) + 128n, true);
      header.setBigUint64(MSGHDR.controllen, BigInt((length + 7) & ~7), true);
    }
    for (;;) {
      const rc = Number(await libc.sendmsg(this.#fd, block, MSG_NOSIGNAL));
      void block; // referenced until the call is done
      if (rc >= 0) return 0;
      // errno belongs to the runtime's thread that made the call: ask again here for it.
      const code = errno();
      if (code !== EINTR) return -(code || 32); // EPIPE when it cannot be known
    }
  }

  /** The next message; null when the peer is gone (or the channel was closed). */
  async receive(): Promise<Received | null> {
    for (;;) {
      if (this.#closed) return null;
      const header = new DataView(this.#block.buffer, 0, MSGHDR.bytes);
      this.#block.fill(0);
      const iov = new DataView(this.#block.buffer, 64, IOVEC.bytes);
      iov.setBigUint64(IOVEC.base, addressOf(this.#data), true);
      iov.setBigUint64(IOVEC.len, BigInt(this.#data.length), true);
      header.setBigUint64(MSGHDR.iov, addressOf(this.#block) + 64n, true);
      header.setBigUint64(MSGHDR.iovlen, 1n, true);
      header.setBigUint64(MSGHDR.control, addressOf(this.#block) + 128n, true);
      header.setBigUint64(MSGHDR.controllen, BigInt(CMSG.data + 8 * MAX_FDS), true);
      const n = Number(await libc.recvmsg(this.#fd, this.#block, MSG_CMSG_CLOEXEC));
      if (n === 0) return null; // the peer closed its end
      if (n < 0) {
        if (this.#closed) return null;
        continue; // EINTR, or a transient error: the next call says more
      }
      const fds: number[] = [];
      const cmsg = new DataView(this.#block.buffer, 128, CMSG.data + 8 * MAX_FDS);
      const length = Number(cmsg.getBigUint64(0, true));
      if (length > CMSG.data && cmsg.getInt32(CMSG.type, true) === SCM_RIGHTS) {
        for (let at = CMSG.data; at + 4 <= length; at += 4) fds.push(cmsg.getInt32(at, true));
      }
      return { data: this.#data.slice(0, n), fds };
    }
  }

  /**
   * Closes this end: a receive under way on either side ends with null (shutdown(2) first: a
   * close alone does not wake a recvmsg blocked on another thread).
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    libc.shutdown(this.#fd, SOCKET.SHUT_RDWR);
    libc.close(this.#fd);
  }
}
