/**
 * An abstract-namespace datagram socket for sd_notify: no file, so it works on a read-only root.
 * Each message carries SO_PASSCRED credentials and the caller decides whom to believe.
 */

import { CMSG, IOVEC, MSGHDR, SOCKET, UCRED, unixAddress } from "./layout.ts";
import { addressOf, errno, libc } from "./symbols.ts";

const SO_PASSCRED = 16; // asm-generic/socket.h
const SCM_CREDENTIALS = 2; // linux/socket.h
/** sd_notify messages are small; systemd reads at most a few KiB. */
const MESSAGE_BYTES = 4096;

/** A datagram and who sent it: the sender's pid in this PID namespace (0: outside it). */
export interface Datagram {
  readonly text: string;
  readonly pid: number;
  readonly uid: number;
}

/** A bound socket that receives datagrams with their senders' credentials. */
export class DatagramSocket {
  readonly #fd: number;
  // One block for the message, the control data and the headers: larger than V8 keeps on its
  // heap, so the addresses written into the header stay valid while recvmsg runs elsewhere.
  readonly #block = new Uint8Array(MESSAGE_BYTES + 256);
  readonly #data = this.#block.subarray(0, MESSAGE_BYTES);
  readonly #control = this.#block.subarray(MESSAGE_BYTES, MESSAGE_BYTES + CMSG.ucredSpace);
  readonly #iov = this.#block.subarray(MESSAGE_BYTES + 64, MESSAGE_BYTES + 64 + IOVEC.bytes);
  readonly #header = this.#block.subarray(MESSAGE_BYTES + 128, MESSAGE_BYTES + 128 + MSGHDR.bytes);
  readonly #decoder = new TextDecoder();
  /** The name as NOTIFY_SOCKET gives it: "@" then the abstract name. */
  readonly name: string;

  private constructor(fd: number, name: string) {
    this.#fd = fd;
    this.name = name;
    const iov = new DataView(this.#block.buffer, this.#iov.byteOffset, IOVEC.bytes);
    iov.setBigUint64(IOVEC.base, addressOf(this.#data), true);
    iov.setBigUint64(IOVEC.len, BigInt(MESSAGE_BYTES), true);
  }

  /** Binds the abstract name `name` (without "@"); throws an Error with errno if it cannot. */
  static bindAbstract(name: string): DatagramSocket {
    const sockaddr = unixAddress(new TextEncoder().encode(name), true);
    const fd = libc.socket(SOCKET.AF_UNIX, SOCKET.DGRAM | SOCKET.CLOEXEC, 0);
    if (fd < 0) throw new Error(`socket failed: errno ${errno()}`);
    const fail = (call: string) => {
      const code = errno();
      libc.close(fd);
      throw new Error(`${call} failed: errno ${code}`);
    };
    const on = new Int32Array([1]);
    if (libc.setsockopt(fd, SOCKET.SOL_SOCKET, SO_PASSCRED, on, 4) !== 0) fail("setsockopt");
    if (libc.bind(fd, sockaddr, sockaddr.length) !== 0) fail("bind");
    return new DatagramSocket(fd, `@${name}`);
  }

  /** The next datagram and its sender; null if the receive failed (the caller retries). */
  async receive(): Promise<Datagram | null> {
    const header = new DataView(this.#block.buffer, this.#header.byteOffset, MSGHDR.bytes);
    this.#header.fill(0);
    this.#control.fill(0);
    header.setBigUint64(MSGHDR.iov, addressOf(this.#iov), true);
    header.setBigUint64(MSGHDR.iovlen, 1n, true);
    header.setBigUint64(MSGHDR.control, addressOf(this.#control), true);
    header.setBigUint64(MSGHDR.controllen, BigInt(CMSG.ucredSpace), true);
    const n = Number(await libc.recvmsg(this.#fd, this.#header, 0));
    if (n < 0) return null;
    const text = this.#decoder.decode(this.#data.subarray(0, n));
    const control = new DataView(this.#block.buffer, this.#control.byteOffset, CMSG.ucredSpace);
    const credentials = control.getInt32(CMSG.level, true) === SOCKET.SOL_SOCKET &&
      control.getInt32(CMSG.type, true) === SCM_CREDENTIALS;
    // No credentials (cannot happen with SO_PASSCRED): pid 0, believed by no one.
    if (!credentials) return { text, pid: 0, uid: -1 };
    return {
      text,
      pid: control.getInt32(CMSG.data + UCRED.pid, true),
      uid: control.getUint32(CMSG.data + UCRED.uid, true),
    };
  }
}
