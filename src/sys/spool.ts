/** Files in a directory other processes share (the job spool): never opened through a link. */

import { O } from "./layout.ts";
import { closeFd, cString, Errno, errno, errnoMessage, libc } from "./symbols.ts";

const O_TRUNC = 0o1000; // fcntl.h (the same on x86_64 and aarch64)

/** Writes all of `bytes` (retrying short writes): 0, or -errno. */
function writeAll(fd: number, bytes: Uint8Array<ArrayBuffer>): number {
  for (let done = 0; done < bytes.length;) {
    const n = Number(libc.write(fd, bytes.subarray(done), BigInt(bytes.length - done)));
    if (n < 0 && errno() === Errno.EINTR) continue;
    if (n < 0) return -errno();
    done += n;
  }
  return 0;
}

/** Replaces `path` whole (`path.new`, mode 0600, renamed over it); throws with errno's message. */
export function replaceFile(path: string, bytes: Uint8Array<ArrayBuffer>): void {
  const flags = O.WRONLY | O.CREAT | O_TRUNC | O.CLOEXEC | O.NOFOLLOW;
  const fd = libc.open(cString(`${path}.new`), flags, 0o600);
  if (fd < 0) throw new Error(`Cannot write "${path}.new": ${errnoMessage(errno())}`);
  const written = writeAll(fd, bytes);
  closeFd(fd);
  if (written < 0) {
    Deno.removeSync(`${path}.new`); // what a full disk left of it
    throw new Error(`Cannot write "${path}.new": ${errnoMessage(-written)}`);
  }
  Deno.renameSync(`${path}.new`, path);
}

/** The whole of the file at `path`, opened without following a link; null if it cannot be read. */
export function readNoFollow(path: string): Uint8Array | null {
  const fd = libc.open(cString(path), O.RDONLY | O.CLOEXEC | O.NOFOLLOW, 0);
  if (fd < 0) return null;
  const parts: Uint8Array[] = [];
  const buffer = new Uint8Array(64 * 1024);
  for (;;) {
    const n = Number(libc.read(fd, buffer, BigInt(buffer.length)));
    if (n < 0 && errno() === Errno.EINTR) continue;
    if (n <= 0) {
      closeFd(fd);
      if (n < 0) return null;
      break;
    }
    parts.push(buffer.slice(0, n));
  }
  const whole = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  parts.reduce((at, part) => (whole.set(part, at), at + part.length), 0);
  return whole;
}
