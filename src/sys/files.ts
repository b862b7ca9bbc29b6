/**
 * File calls for copy mode: statx, open, copy_file_range and metadata by descriptor. Typed
 * wrappers over FILE_SYMBOLS; each reads errno right after its call.
 */

import { O, STATX } from "./layout.ts";
import { FILE_SYMBOLS, messageOf, openLibc, readErrno } from "./symbols.ts";

const libc = openLibc(FILE_SYMBOLS);

function errno(): number {
  return readErrno(libc.__errno_location);
}

/** The C library's message for an errno value, e.g. "No such file or directory". */
export function errnoMessage(code: number): string {
  return messageOf(libc.strerror, code);
}

const encoder = new TextEncoder();

/** A NUL-terminated copy of a string or of raw bytes. */
export function cString(value: string | Uint8Array): Uint8Array<ArrayBuffer> {
  const bytes = typeof value === "string" ? encoder.encode(value) : value;
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}

/** Result of a call that only fails with errno. */
export type CallResult = { ok: true } | { ok: false; errno: number };

function checked(rc: number): CallResult {
  return rc === 0 ? { ok: true } : { ok: false, errno: errno() };
}

/** A call's value, or the errno it failed with. */
export type Outcome<T> = { ok: true; value: T } | { ok: false; errno: number };

function outcome(rc: number): Outcome<number> {
  return rc >= 0 ? { ok: true, value: rc } : { ok: false, errno: errno() };
}

const AT_FDCWD = -100; // fcntl.h
const AT_SYMLINK_NOFOLLOW = 0x100; // fcntl.h
const AT_EMPTY_PATH = 0x1000; // fcntl.h
const STATX_BASIC_STATS = 0x7ff; // linux/stat.h

/** A point in time as the kernel keeps it. */
export interface Timestamp {
  readonly sec: bigint;
  readonly nsec: number;
}

/** What lstat/statx says about a path (never following a final symlink). */
export interface PathStat {
  readonly kind: "file" | "dir" | "link" | "fifo" | "socket" | "char-device" | "block-device";
  /** Permission bits, setuid/setgid/sticky included (mode & 07777). */
  readonly mode: number;
  readonly uid: number;
  readonly gid: number;
  readonly size: number;
  readonly atime: Timestamp;
  readonly mtime: Timestamp;
}

const KINDS: ReadonlyMap<number, PathStat["kind"]> = new Map([
  [0o100000, "file"], // S_IFREG
  [0o040000, "dir"], // S_IFDIR
  [0o120000, "link"], // S_IFLNK
  [0o010000, "fifo"], // S_IFIFO
  [0o140000, "socket"], // S_IFSOCK
  [0o020000, "char-device"], // S_IFCHR
  [0o060000, "block-device"], // S_IFBLK
]);

// One statx buffer for every call: statPath is on the hot path of planning a copy.
const statxBuffer = new Uint8Array(STATX.bytes);
const statxView = new DataView(statxBuffer.buffer);

const EMPTY_PATH = new Uint8Array(1);

/** statx(2) without following a final symlink. */
export function statPath(path: string): Outcome<PathStat> {
  return statx(AT_FDCWD, cString(path), AT_SYMLINK_NOFOLLOW);
}

/** statx(2) of an open file (fstat). */
export function statFd(fd: number): Outcome<PathStat> {
  return statx(fd, EMPTY_PATH, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
}

function statx(dirfd: number, path: Uint8Array, flags: number): Outcome<PathStat> {
  const buffer = statxBuffer;
  const rc = libc.statx(dirfd, path, flags, STATX_BASIC_STATS, buffer);
  if (rc !== 0) return { ok: false, errno: errno() };
  const view = statxView;
  const mode = view.getUint16(28, true); // stx_mode
  const time = (offset: number): Timestamp => ({
    sec: view.getBigInt64(offset, true), // tv_sec
    nsec: view.getUint32(offset + 8, true), // tv_nsec
  });
  return {
    ok: true,
    value: {
      kind: KINDS.get(mode & 0o170000) ?? "file",
      mode: mode & 0o7777,
      uid: view.getUint32(20, true), // stx_uid
      gid: view.getUint32(24, true), // stx_gid
      size: Number(view.getBigUint64(40, true)), // stx_size
      atime: time(64), // stx_atime
      mtime: time(112), // stx_mtime
    },
  };
}

/** open(path, O_RDONLY | O.NOFOLLOW): a symlink is refused (ELOOP), never followed. */
export function openForReading(path: string): Outcome<number> {
  return outcome(libc.openat(AT_FDCWD, cString(path), O.NOFOLLOW | O.NONBLOCK | O.CLOEXEC, 0));
}

/** open(path, O.CREAT | O.EXCL | O.WRONLY): a new file, never an existing one or a symlink. */
export function createExclusive(path: string, mode: number): Outcome<number> {
  const flags = O.WRONLY | O.CREAT | O.EXCL | O.NOFOLLOW | O.CLOEXEC;
  return outcome(libc.openat(AT_FDCWD, cString(path), flags, mode));
}

/** open(path, O_RDONLY | O.DIRECTORY), for fsync of a directory. */
export function openDirectory(path: string): Outcome<number> {
  return outcome(libc.openat(AT_FDCWD, cString(path), O.DIRECTORY | O.CLOEXEC, 0));
}

/** close(2). */
export function closeFd(fd: number): void {
  // close(2): even on EINTR the descriptor is released on Linux; nothing to retry.
  libc.close(fd);
}

/** copy_file_range(2) of up to `length` bytes at the current offsets; 0 at end of input. */
export function copyRange(input: number, output: number, length: number): Outcome<number> {
  return outcome(
    Number(libc.copy_file_range(input, null, output, null, BigInt(length), 0)),
  );
}

/**
 * The same on a worker thread, for large chunks: the event loop (and so signal handling)
 * stays free. errno cannot be read across threads: a failure is reported as errno 0, and the
 * caller retries on this thread to learn the cause.
 */
export async function copyRangeOnThread(
  input: number,
  output: number,
  length: number,
): Promise<Outcome<number>> {
  const n = Number(
    await libc.copy_file_range_blocking(input, null, output, null, BigInt(length), 0),
  );
  return n >= 0 ? { ok: true, value: n } : { ok: false, errno: 0 };
}

/** sendfile(2): the fallback where copy_file_range is refused (EXDEV, EINVAL, ENOSYS). */
export function sendFile(output: number, input: number, length: number): Outcome<number> {
  return outcome(Number(libc.sendfile(output, input, null, BigInt(length))));
}

function timespecs(atime: Timestamp, mtime: Timestamp): Uint8Array<ArrayBuffer> {
  const times = new BigInt64Array([atime.sec, BigInt(atime.nsec), mtime.sec, BigInt(mtime.nsec)]);
  return new Uint8Array(times.buffer); // struct timespec times[2]
}

/** fchmod(2). */
export function setFdMode(fd: number, mode: number): CallResult {
  return checked(libc.fchmod(fd, mode));
}

/** fchown(2). */
export function setFdOwner(fd: number, uid: number, gid: number): CallResult {
  return checked(libc.fchown(fd, uid, gid));
}

/** futimens(2): access and modification times, to the nanosecond. */
export function setFdTimes(fd: number, atime: Timestamp, mtime: Timestamp): CallResult {
  return checked(libc.futimens(fd, timespecs(atime, mtime)));
}

/** utimensat(2) on the path itself (a symlink's own times, not its target's). */
export function setPathTimes(path: string, atime: Timestamp, mtime: Timestamp): CallResult {
  const rc = libc.utimensat(
    AT_FDCWD,
    cString(path),
    timespecs(atime, mtime),
    AT_SYMLINK_NOFOLLOW,
  );
  return checked(rc);
}

/** fchownat(2) on the path itself (lchown for a symlink). */
export function setPathOwner(path: string, uid: number, gid: number): CallResult {
  return checked(libc.fchownat(AT_FDCWD, cString(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

/** chmod(2) of a path (directories; never used on a symlink). */
export function setPathMode(path: string, mode: number): CallResult {
  return checked(libc.fchmodat(AT_FDCWD, cString(path), mode, 0));
}

/** fsync(2). */
export function syncFd(fd: number): CallResult {
  return checked(libc.fsync(fd));
}

/** rename(2): atomic replacement of `to`, which is never followed if it is a symlink. */
export function renamePath(from: string, to: string): CallResult {
  return checked(libc.renameat(AT_FDCWD, cString(from), AT_FDCWD, cString(to)));
}
