/**
 * Shutting down a TCP connection that Deno cannot close: a connection whose write never
 * completes (the client does not read) can keep its socket open after `conn.close()`, because
 * the pending write holds it. shutdown(2) makes that write fail, which releases it. Deno does
 * not expose the descriptor, so it is found by its two ends: getsockname and getpeername of
 * each socket descriptor of this process (a few hundred system calls, not a read of the
 * namespace's whole /proc/net/tcp). Loaded only when a write is stuck.
 */

import { NET_SYMBOLS, openLibc } from "./symbols.ts";

const libc = openLibc(NET_SYMBOLS);
const SHUT_RDWR = 2; // sys/socket.h
const AF_INET = 2; // sys/socket.h
const AF_INET6 = 10; // sys/socket.h

/** A connection to shut down, by its two ends. */
export interface Endpoints {
  readonly local: Deno.NetAddr;
  readonly remote: Deno.NetAddr;
}

const address = new Uint8Array(128); // struct sockaddr_storage
const length = new Uint32Array(1); // socklen_t

/** "port address" of a sockaddr, as Deno.NetAddr would print it (IPv4-mapped as IPv4). */
function endOf(
  call: (fd: number, addr: Uint8Array, len: Uint32Array) => number,
  fd: number,
): string | null {
  length[0] = address.length;
  if (call(fd, address, length) !== 0) return null;
  const view = new DataView(address.buffer);
  const family = view.getUint16(0, true);
  const port = view.getUint16(2, false); // sin_port / sin6_port, network order
  if (family === AF_INET) return `${port} ${address.subarray(4, 8).join(".")}`;
  if (family !== AF_INET6) return null;
  const bytes = address.subarray(8, 24);
  const mapped = bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff &&
    bytes[11] === 0xff;
  if (mapped) return `${port} ${bytes.subarray(12, 16).join(".")}`;
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(view.getUint16(8 + i, false).toString(16));
  return `${port} ${groups.join(":")}`;
}

function keyOf(ends: Endpoints): string {
  const host = (name: string) =>
    name.includes(":") ? name.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, "$1") : name;
  // Deno writes IPv6 addresses compressed; compare by expanded groups.
  const expand = (name: string) => {
    const h = host(name);
    if (!h.includes(":")) return h;
    const [head = "", tail = ""] = h.split("::");
    const a = head === "" ? [] : head.split(":");
    const b = tail === "" ? [] : tail.split(":");
    const groups = h.includes("::") ? [...a, ...Array(8 - a.length - b.length).fill("0"), ...b] : a;
    return groups.map((g) => parseInt(g, 16).toString(16)).join(":");
  };
  return `${ends.local.port} ${expand(ends.local.hostname)}|${ends.remote.port} ${
    expand(ends.remote.hostname)
  }`;
}

/**
 * shutdown(2) of the sockets of these TCP connections that still have a descriptor. Returns,
 * for each target, whether a descriptor was still open: false means it is gone already.
 */
export function shutdownConnections(targets: readonly Endpoints[]): boolean[] {
  const wanted = new Map(targets.map((ends, i) => [keyOf(ends), i]));
  const open = targets.map(() => false);
  for (const entry of Deno.readDirSync("/proc/self/fd")) {
    try {
      if (!Deno.readLinkSync(`/proc/self/fd/${entry.name}`).startsWith("socket:")) continue;
    } catch {
      continue; // closed while we looked
    }
    const fd = Number(entry.name);
    const local = endOf(libc.getsockname, fd);
    const remote = endOf(libc.getpeername, fd);
    if (local === null || remote === null) continue; // not connected: a listener, or reset
    const index = wanted.get(`${local}|${remote}`);
    if (index === undefined) continue;
    open[index] = true;
    libc.shutdown(fd, SHUT_RDWR);
  }
  return open;
}
