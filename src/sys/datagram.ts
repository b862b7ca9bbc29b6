/**
 * A Unix datagram socket in the abstract namespace, for the systemd notification protocol
 * (`--ready-when notify`). Abstract: no file to create, so it works on a read-only root and for
 * a child of any user (an abstract socket has no permissions); sd_notify(3) reads a
 * NOTIFY_SOCKET that starts with "@" as such a name. Deno's own Unix datagram sockets are
 * unstable API, hence these few calls.
 */

import { DATAGRAM_SYMBOLS, openLibc, readErrno } from "./symbols.ts";

const libc = openLibc(DATAGRAM_SYMBOLS);
const AF_UNIX = 1; // sys/socket.h
const SOCK_DGRAM = 2; // sys/socket.h
const SOCK_CLOEXEC = 0o2000000; // the child must not inherit the socket
const SUN_PATH_OFFSET = 2; // struct sockaddr_un { sa_family_t sun_family; char sun_path[108]; }
const SUN_PATH_BYTES = 108;
/** sd_notify messages are small; systemd reads at most a few KiB. */
const MESSAGE_BYTES = 4096;

/** A bound socket that receives datagrams. */
export class DatagramSocket {
  readonly #fd: number;
  readonly #buffer = new Uint8Array(MESSAGE_BYTES);
  readonly #decoder = new TextDecoder();
  /** The name as NOTIFY_SOCKET gives it: "@" then the abstract name. */
  readonly name: string;

  private constructor(fd: number, name: string) {
    this.#fd = fd;
    this.name = name;
  }

  /** Binds the abstract name `name` (without "@"); throws an Error with errno if it cannot. */
  static bindAbstract(name: string): DatagramSocket {
    const bytes = new TextEncoder().encode(name);
    if (bytes.length + 1 > SUN_PATH_BYTES) throw new RangeError("socket name too long");
    const fd = libc.socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw new Error(`socket failed: errno ${readErrno(libc.__errno_location)}`);
    const address = new Uint8Array(SUN_PATH_OFFSET + 1 + bytes.length);
    new DataView(address.buffer).setUint16(0, AF_UNIX, true);
    address.set(bytes, SUN_PATH_OFFSET + 1); // sun_path[0] = 0: the abstract namespace
    if (libc.bind(fd, address, address.length) !== 0) {
      const errno = readErrno(libc.__errno_location);
      libc.close(fd);
      throw new Error(`bind failed: errno ${errno}`);
    }
    return new DatagramSocket(fd, `@${name}`);
  }

  /** The next datagram as text; null if the receive failed (the caller waits and retries). */
  async receive(): Promise<string | null> {
    const n = Number(await libc.recv(this.#fd, this.#buffer, BigInt(this.#buffer.length), 0));
    if (n < 0) return null;
    return this.#decoder.decode(this.#buffer.subarray(0, n));
  }
}
