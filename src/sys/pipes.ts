/**
 * Pipes and spool files for the job service (`--jobs-socket` only): the main thread makes a
 * job's pipes and the spawn's file actions; the service's thread polls the read ends and
 * copies what arrives into spool files. Typed wrappers over the C library; errors are -errno.
 */

import { FILE_ACTIONS_BYTES, O } from "./layout.ts";
import { closeFd, cString, Errno, errno, errnoMessage, libc } from "./symbols.ts";

const F_SETFL = 4; // fcntl.h
const F_DUPFD_CLOEXEC = 1030; // fcntl.h
const O_TRUNC = 0o1000; // fcntl.h (the same on x86_64 and aarch64)
const SEEK_SET = 0; // unistd.h
const SEEK_END = 2; // unistd.h
const POLLIN = 0x1; // poll.h
/** poll.h: POLLERR | POLLHUP | POLLNVAL, reported whether asked for or not. */
const POLL_ENDED = 0x8 | 0x10 | 0x20;
/** struct pollfd { int fd; short events; short revents; } */
const POLLFD_BYTES = 8;

/** close(2) and errno's message, as the rest of the C library's wrappers have them. */
export { closeFd, errnoMessage };

/** pipe2(O_CLOEXEC): [read end, write end], or -errno. Only what dup2 puts at 1 or 2 is inherited. */
export function openPipe(): { read: number; write: number } | number {
  const fds = new Int32Array(2);
  if (libc.pipe2(fds, O.CLOEXEC) !== 0) return -errno();
  return { read: fds[0] ?? -1, write: fds[1] ?? -1 };
}

/** Makes reads from this end return EAGAIN instead of waiting (the pump reads until then). */
export function setNonBlocking(fd: number): number {
  return libc.fcntl(fd, F_SETFL, O.NONBLOCK) === 0 ? 0 : -errno();
}

/** Where a job's standard streams go, and where it starts. */
export interface JobStreams {
  readonly stdout: number;
  readonly stderr: number;
  /** An existing directory, or null for denit's own. */
  readonly workDir: string | null;
}

/** True when this C library can change directory in posix_spawn (glibc 2.29+). */
export function canChangeDirectoryOnSpawn(): boolean {
  return libc.posix_spawn_file_actions_addchdir_np !== null;
}

/**
 * posix_spawn file actions for a job: stdin from /dev/null, stdout and stderr onto the pipes'
 * write ends, then the working directory. The caller passes them to spawn() and then calls
 * `destroyFileActions()`.
 */
export function jobFileActions(streams: JobStreams): Uint8Array<ArrayBuffer> {
  const actions = new Uint8Array(FILE_ACTIONS_BYTES);
  libc.posix_spawn_file_actions_init(actions);
  // glibc copies the paths into the actions: they need not outlive these calls.
  libc.posix_spawn_file_actions_addopen(actions, 0, cString("/dev/null"), O.RDONLY, 0);
  libc.posix_spawn_file_actions_adddup2(actions, streams.stdout, 1);
  libc.posix_spawn_file_actions_adddup2(actions, streams.stderr, 2);
  if (streams.workDir !== null) {
    libc.posix_spawn_file_actions_addchdir_np?.(actions, cString(streams.workDir));
  }
  return actions;
}

/**
 * posix_spawn file actions for the job service's process: stdin from /dev/null, and each
 * [descriptor, target] pair copied to its target (dup2 clears close-on-exec on the copy). A
 * descriptor that is itself a target (a runtime started by denit's launcher leaves 3 and 4 free)
 * is first copied above every target, so that no copy overwrites another's source; `release`
 * frees those copies and the actions once the spawn is done.
 */
export function serviceFileActions(
  pairs: ReadonlyArray<readonly [number, number]>,
): { actions: Uint8Array<ArrayBuffer>; release: () => void } {
  const targets = pairs.map(([, target]) => target);
  const above = Math.max(...targets) + 1;
  const copies: number[] = [];
  const actions = new Uint8Array(FILE_ACTIONS_BYTES);
  libc.posix_spawn_file_actions_init(actions);
  const release = () => {
    libc.posix_spawn_file_actions_destroy(actions);
    copies.forEach(closeFd);
  };
  libc.posix_spawn_file_actions_addopen(actions, 0, cString("/dev/null"), O.RDONLY, 0);
  for (const [fd, target] of pairs) {
    let source = fd;
    if (targets.includes(fd)) {
      source = libc.fcntl(fd, F_DUPFD_CLOEXEC, above);
      if (source < 0) {
        const code = errno();
        release();
        throw new Error(`fcntl(F_DUPFD_CLOEXEC): ${errnoMessage(code)}`);
      }
      copies.push(source);
    }
    libc.posix_spawn_file_actions_adddup2(actions, source, target);
  }
  return { actions, release };
}

/** posix_spawn_file_actions_destroy(3). */
export function destroyFileActions(actions: Uint8Array<ArrayBuffer>): void {
  libc.posix_spawn_file_actions_destroy(actions);
}

/** read(2) into `buffer`: the count (> 0), 0 at the end, or -errno (-EAGAIN: nothing yet). */
export function readSome(fd: number, buffer: Uint8Array<ArrayBuffer>): number {
  const n = Number(libc.read(fd, buffer, BigInt(buffer.length)));
  return n >= 0 ? n : -errno();
}

/** Writes `length` bytes of `buffer` whole (retrying short writes): 0, or -errno. */
export function writeAll(fd: number, buffer: Uint8Array<ArrayBuffer>, length: number): number {
  let done = 0;
  while (done < length) {
    const rest = done === 0 ? buffer : buffer.subarray(done);
    const n = Number(libc.write(fd, rest, BigInt(length - done)));
    if (n < 0) {
      const code = errno();
      if (code === Errno.EINTR) continue;
      return -code;
    }
    done += n;
  }
  return 0;
}

/**
 * A spool file, mode 0600: new and empty, or (`keep`) as a service before this one left it.
 * Its descriptor, or -errno.
 */
export function openSpoolFile(path: string, keep: boolean): number {
  const flags = O.WRONLY | O.CREAT | (keep ? 0 : O_TRUNC) | O.CLOEXEC | O.NOFOLLOW;
  const fd = libc.open(cString(path), flags, 0o600);
  return fd >= 0 ? fd : -errno();
}

/**
 * Replaces `path` whole: `bytes` go to `path.new` (opened without following a link), which is
 * then renamed over it. Throws with errno's message.
 */
export function replaceFile(path: string, bytes: Uint8Array<ArrayBuffer>): void {
  const fd = openSpoolFile(`${path}.new`, false);
  if (fd < 0) throw new Error(`Cannot write "${path}.new": ${errnoMessage(-fd)}`);
  const written = writeAll(fd, bytes, bytes.length);
  closeFd(fd);
  if (written < 0) throw new Error(`Cannot write "${path}.new": ${errnoMessage(-written)}`);
  Deno.renameSync(`${path}.new`, path);
}

/** The whole of the file at `path`, opened without following a link; null if it cannot be read. */
export function readNoFollow(path: string): Uint8Array | null {
  const fd = libc.open(cString(path), O.RDONLY | O.CLOEXEC | O.NOFOLLOW, 0);
  if (fd < 0) return null;
  const parts: Uint8Array[] = [];
  const buffer = new Uint8Array(64 * 1024);
  for (let n = readSome(fd, buffer); n !== 0; n = readSome(fd, buffer)) {
    if (n === -Errno.EINTR) continue;
    if (n < 0) {
      closeFd(fd);
      return null;
    }
    parts.push(buffer.slice(0, n));
  }
  closeFd(fd);
  const whole = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  parts.reduce((at, part) => (whole.set(part, at), at + part.length), 0);
  return whole;
}

/** Writes all of `bytes` at `offset` of the file (lseek, then write): 0, or -errno. */
export function writeAt(fd: number, bytes: Uint8Array<ArrayBuffer>, offset: number): number {
  if (Number(libc.lseek(fd, BigInt(offset), SEEK_SET)) < 0) return -errno();
  return writeAll(fd, bytes, bytes.length);
}

/** The size of an open file (lseek to its end), or -errno. */
export function fileSize(fd: number): number {
  const end = Number(libc.lseek(fd, 0n, SEEK_END));
  return end >= 0 ? end : -errno();
}

const SPLICE_F_NONBLOCK = 0x02; // fcntl.h

/**
 * splice(2): up to `length` bytes from the pipe `from` into the file `to` at `at` (which the
 * kernel moves on). The count (> 0), 0 when every writer of the pipe is gone, or -errno
 * (-EAGAIN: nothing in the pipe now). The bytes leave the pipe and enter the file in one call:
 * a process killed around it loses none.
 */
export function spliceInto(
  from: number,
  to: number,
  at: BigInt64Array<ArrayBuffer>,
  length: number,
): number {
  const n = Number(libc.splice(from, null, to, at, BigInt(length), SPLICE_F_NONBLOCK));
  return n >= 0 ? n : -errno();
}

/**
 * Waits (on a thread of the runtime, not this one) until one of `fds` is readable or ended,
 * or `timeoutMs` passes (-1: no limit). Returns, per descriptor, whether it needs a read.
 */
export async function pollReadable(fds: readonly number[], timeoutMs: number): Promise<boolean[]> {
  const table = new Uint8Array(fds.length * POLLFD_BYTES);
  const view = new DataView(table.buffer);
  fds.forEach((fd, i) => {
    view.setInt32(i * POLLFD_BYTES, fd, true);
    view.setInt16(i * POLLFD_BYTES + 4, POLLIN, true);
  });
  const rc = await libc.poll(table, BigInt(fds.length), timeoutMs);
  if (rc <= 0) return fds.map(() => false);
  return fds.map((_, i) =>
    (view.getInt16(i * POLLFD_BYTES + 6, true) & (POLLIN | POLL_ENDED)) !== 0
  );
}

/**
 * malloc_trim(0): gives the C heap's free memory back to the kernel, in every arena (each
 * thread of the runtime allocates from its own, and glibc trims only the main one by itself).
 */
export function trimHeap(): void {
  libc.malloc_trim(0n);
}
