/**
 * File calls for copy mode, on directory descriptors and raw names, never following a final
 * symlink: a directory swapped for a symlink cannot redirect a write.
 */

import { DIRENT64, O, STATX } from "./layout.ts";
import { fileLimit, setFileLimit } from "./process.ts";
import { type CallResult, checked, cString, Errno, errno, libc } from "./symbols.ts";

export { type CallResult, closeFd, Errno, errnoMessage } from "./symbols.ts";

export type Outcome<T> = { ok: true; value: T } | { ok: false; errno: number };

function outcome(rc: number): Outcome<number> {
  return rc >= 0 ? { ok: true, value: rc } : { ok: false, errno: errno() };
}

/** The working directory, for paths given on the command line. */
export const AT_FDCWD = -100; // fcntl.h
const AT_SYMLINK_NOFOLLOW = 0x100; // fcntl.h
const AT_REMOVEDIR = 0x200; // fcntl.h
const AT_SYMLINK_FOLLOW = 0x400; // fcntl.h
const AT_EMPTY_PATH = 0x1000; // fcntl.h
const STATX_BASIC_STATS = 0x7ff; // linux/stat.h
const SEEK_SET = 0; // unistd.h
const SEEK_DATA = 3; // unistd.h
const SEEK_HOLE = 4; // unistd.h
const EMPTY = new Uint8Array(1);

export interface Timestamp {
  readonly sec: bigint;
  readonly nsec: number;
}

export type FileKind =
  | "file"
  | "dir"
  | "link"
  | "fifo"
  | "socket"
  | "char-device"
  | "block-device";

/** By getdents64's d_type, which is the mode's S_IFMT bits shifted right by 12 (IFTODT). */
const KINDS: ReadonlyMap<number, FileKind> = new Map([
  [8, "file"], // DT_REG
  [4, "dir"], // DT_DIR
  [10, "link"], // DT_LNK
  [1, "fifo"], // DT_FIFO
  [12, "socket"], // DT_SOCK
  [2, "char-device"], // DT_CHR
  [6, "block-device"], // DT_BLK
]);

// One statx buffer per thread: statx is on the hot path of a copy.
const statxBuffer = new Uint8Array(STATX.bytes);
const statxView = new DataView(statxBuffer.buffer);

/** What the statx buffer holds after a call. */
function decodeStatx(view: DataView) {
  const mode = view.getUint16(STATX.mode, true);
  const time = (offset: number): Timestamp => ({
    sec: view.getBigInt64(offset, true), // tv_sec
    nsec: view.getUint32(offset + 8, true), // tv_nsec
  });
  return {
    kind: KINDS.get((mode & 0o170000) >> 12) ?? "file",
    mode: mode & 0o7777, // permission bits, setuid, setgid and sticky included
    uid: view.getUint32(STATX.uid, true),
    gid: view.getUint32(STATX.gid, true),
    size: Number(view.getBigUint64(STATX.size, true)),
    nlink: view.getUint32(STATX.nlink, true),
    blocks: Number(view.getBigUint64(STATX.blocks, true)), // of 512 bytes: fewer means holes
    ino: view.getBigUint64(STATX.ino, true),
    dev: `${view.getUint32(STATX.devMajor, true)}:${view.getUint32(STATX.devMinor, true)}`,
    atime: time(STATX.atime),
    mtime: time(STATX.mtime),
  };
}

/** statx of an entry (never following a final symlink). */
export type PathStat = Readonly<ReturnType<typeof decodeStatx>>;

function statx(dirFd: number, name: Uint8Array, flags: number): Outcome<PathStat> {
  const rc = libc.statx(dirFd, name, flags, STATX_BASIC_STATS, statxBuffer);
  return rc === 0 ? { ok: true, value: decodeStatx(statxView) } : { ok: false, errno: errno() };
}

export function statAt(dirFd: number, name: Uint8Array): Outcome<PathStat> {
  return statx(dirFd, cString(name), AT_SYMLINK_NOFOLLOW);
}

/** statx of a path given on the command line; `follow` follows a final symlink. */
export function statPath(path: string, follow: boolean): Outcome<PathStat> {
  return statx(AT_FDCWD, cString(path), follow ? 0 : AT_SYMLINK_NOFOLLOW);
}

export function statFd(fd: number): Outcome<PathStat> {
  return statx(fd, EMPTY, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
}

/** A directory below `dirFd` (or a path, AT_FDCWD); through a final symlink only if `follow`. */
export function openDirectory(
  dirFd: number,
  name: Uint8Array | string,
  follow = false,
): Outcome<number> {
  const flags = O.RDONLY | O.DIRECTORY | O.CLOEXEC | (follow ? 0 : O.NOFOLLOW);
  return outcome(libc.openat(dirFd, cString(name), flags, 0));
}

/** Opens a file for reading: a symlink is refused (ELOOP), a FIFO does not block. */
export function openForReading(dirFd: number, name: Uint8Array | string): Outcome<number> {
  return outcome(libc.openat(dirFd, cString(name), O.NOFOLLOW | O.NONBLOCK | O.CLOEXEC, 0));
}

/** Creates a new file (O_EXCL: never an existing one, never through a symlink). */
export function createExclusive(dirFd: number, name: Uint8Array, mode: number): Outcome<number> {
  const flags = O.RDWR | O.CREAT | O.EXCL | O.NOFOLLOW | O.CLOEXEC;
  return outcome(libc.openat(dirFd, cString(name), flags, mode));
}

export function makeDirectory(dirFd: number, name: Uint8Array | string, mode: number): CallResult {
  return checked(libc.mkdirat(dirFd, cString(name), mode));
}

export function makeSymlink(target: Uint8Array, dirFd: number, name: Uint8Array): CallResult {
  return checked(libc.symlinkat(cString(target), dirFd, cString(name)));
}

export function readSymlink(dirFd: number, name: Uint8Array | string): Outcome<Uint8Array> {
  let size = 256;
  for (;;) {
    const buffer = new Uint8Array(size);
    const n = Number(libc.readlinkat(dirFd, cString(name), buffer, BigInt(size)));
    if (n < 0) return { ok: false, errno: errno() };
    if (n < size) return { ok: true, value: buffer.slice(0, n) };
    size *= 4; // the target may have been cut: ask again with room to spare
  }
}

/** renameat(2): a symlink at `to` is replaced, never followed. */
export function renameEntry(
  fromDir: number,
  from: Uint8Array,
  toDir: number,
  to: Uint8Array,
): CallResult {
  return checked(libc.renameat(fromDir, cString(from), toDir, cString(to)));
}

/** unlinkat(2) of a file or link (or an empty directory with `directory`). */
export function removeEntry(dirFd: number, name: Uint8Array, directory: boolean): CallResult {
  return checked(libc.unlinkat(dirFd, cString(name), directory ? AT_REMOVEDIR : 0));
}

/** A hard link to the file open as `fd`: through /proc/self/fd/N, else AT_EMPTY_PATH (root). */
export function linkOpenFile(fd: number, dirFd: number, name: Uint8Array): CallResult {
  const viaProc = libc.linkat(
    AT_FDCWD,
    cString(`/proc/self/fd/${fd}`),
    dirFd,
    cString(name),
    AT_SYMLINK_FOLLOW,
  );
  if (viaProc === 0) return { ok: true };
  const first = errno();
  if (first !== Errno.ENOENT) return { ok: false, errno: first };
  return checked(libc.linkat(fd, EMPTY, dirFd, cString(name), AT_EMPTY_PATH));
}

/** A directory entry: its raw name and its type from getdents64 (null: unknown, statx it). */
export interface DirEntry {
  readonly name: Uint8Array;
  readonly kind: FileKind | null;
}

const direntBuffer = new Uint8Array(64 * 1024);
const direntView = new DataView(direntBuffer.buffer);

/** Every entry of an open directory but "." and "..", names as raw bytes, from the start. */
export function listDirectory(fd: number): Outcome<DirEntry[]> {
  libc.lseek(fd, 0n, SEEK_SET);
  const entries: DirEntry[] = [];
  for (;;) {
    const n = Number(libc.getdents64(fd, direntBuffer, BigInt(direntBuffer.length)));
    if (n < 0) return { ok: false, errno: errno() };
    if (n === 0) return { ok: true, value: entries };
    for (let offset = 0; offset < n;) {
      const length = direntView.getUint16(offset + DIRENT64.reclen, true);
      const type = direntView.getUint8(offset + DIRENT64.type);
      const start = offset + DIRENT64.name;
      const end = direntBuffer.indexOf(0, start);
      const name = direntBuffer.slice(start, end);
      const dots = name.length <= 2 && name[0] === 0x2e && (name.length === 1 || name[1] === 0x2e);
      if (!dots) entries.push({ name, kind: KINDS.get(type) ?? null });
      offset += length;
    }
  }
}

/**
 * copy_file_range(2) of up to `length` bytes at `at`; 0 at end. On a runtime thread (`onThread`)
 * errno cannot be read: a failure reads as 0, and the caller repeats the call here.
 */
async function copyRangeAt(
  input: number,
  output: number,
  at: number,
  length: number,
  onThread: boolean,
): Promise<Outcome<number>> {
  // Over V8's 64-byte on-heap limit, and referenced until the call returns: the kernel writes
  // the offsets back, on another thread with `onThread`.
  const place = new BigInt64Array(16);
  place.set([BigInt(at), BigInt(at)]);
  const [from, to, size] = [place.subarray(0, 1), place.subarray(1, 2), BigInt(length)];
  const n = Number(
    onThread
      ? await libc.copy_file_range_blocking(input, from, output, to, size, 0)
      : libc.copy_file_range(input, from, output, to, size, 0),
  );
  void place;
  return n >= 0 ? { ok: true, value: n } : { ok: false, errno: onThread ? 0 : errno() };
}

function sendAt(input: number, output: number, at: number, length: number): Outcome<number> {
  libc.lseek(output, BigInt(at), SEEK_SET);
  const offset = new BigInt64Array([BigInt(at)]);
  return outcome(Number(libc.sendfile(output, input, offset, BigInt(length))));
}

const SMALL_CHUNK = 8 << 20; // copied on this thread in one call
const THREAD_CHUNK = 64 << 20; // larger files go in chunks on a runtime thread

// copy_file_range(2) refuses some pairs of files; sendfile(2) handles any regular files.
const FALLBACK_ERRNOS: ReadonlySet<number> = new Set([
  Errno.EXDEV,
  Errno.EINVAL,
  Errno.ENOSYS,
  Errno.ENOTSUP,
]);

/**
 * Copies `size` bytes; `sparse`: only SEEK_DATA's ranges, then truncated, so holes stay. `check`
 * runs between chunks (it throws to stop the copy).
 */
export async function copyData(
  input: number,
  output: number,
  size: number,
  sparse: boolean,
  check: () => void,
): Promise<Outcome<number>> {
  let copied = 0;
  let useSendfile = false;
  let at = 0;
  while (at < size) {
    let end = size;
    if (sparse) {
      const data = Number(libc.lseek(input, BigInt(at), SEEK_DATA));
      if (data < 0) break; // ENXIO: nothing but a hole from here to the end
      const hole = Number(libc.lseek(input, BigInt(data), SEEK_HOLE));
      at = data;
      end = hole < 0 ? size : Math.min(hole, size);
    }
    while (at < end) {
      check();
      const wanted = Math.min(end - at, THREAD_CHUNK);
      let result = useSendfile
        ? sendAt(input, output, at, wanted)
        : await copyRangeAt(input, output, at, wanted, wanted > SMALL_CHUNK);
      if (!result.ok && result.errno === 0) {
        result = await copyRangeAt(input, output, at, wanted, false);
      }
      if (!result.ok && !useSendfile && FALLBACK_ERRNOS.has(result.errno)) {
        useSendfile = true;
        continue;
      }
      if (!result.ok) return result;
      if (result.value === 0) {
        end = at; // the file shrank while we copied it: stop at what is there
        size = at;
        break;
      }
      at += result.value;
      copied += result.value;
    }
  }
  // Holes at the end (and a file that is all hole) take no blocks: set the size.
  if (sparse) {
    const truncated = checked(libc.ftruncate(output, BigInt(size)));
    if (!truncated.ok) return truncated;
  }
  return { ok: true, value: copied };
}

/** Reads `length` bytes at `at` (for --verify). */
export function readAt(fd: number, buffer: Uint8Array, at: number): Outcome<number> {
  return outcome(Number(libc.pread(fd, buffer, BigInt(buffer.length), BigInt(at))));
}

function timespecs(atime: Timestamp, mtime: Timestamp): Uint8Array<ArrayBuffer> {
  const times = new BigInt64Array([atime.sec, BigInt(atime.nsec), mtime.sec, BigInt(mtime.nsec)]);
  return new Uint8Array(times.buffer); // struct timespec times[2]
}

/** What the attribute calls change: an open descriptor, or a symlink itself (never followed). */
export type Target = number | { readonly dirFd: number; readonly name: Uint8Array };

export function setMode(fd: number, mode: number): CallResult {
  return checked(libc.fchmod(fd, mode));
}

export function setOwner(to: Target, uid: number, gid: number): CallResult {
  return checked(
    typeof to === "number"
      ? libc.fchown(to, uid, gid)
      : libc.fchownat(to.dirFd, cString(to.name), uid, gid, AT_SYMLINK_NOFOLLOW),
  );
}

export function setTimes(to: Target, atime: Timestamp, mtime: Timestamp): CallResult {
  const times = timespecs(atime, mtime);
  return checked(
    typeof to === "number"
      ? libc.futimens(to, times)
      : libc.utimensat(to.dirFd, cString(to.name), times, AT_SYMLINK_NOFOLLOW),
  );
}

export function syncFd(fd: number): CallResult {
  return checked(libc.fsync(fd));
}

function splitNames(list: Uint8Array): Uint8Array[] {
  const names: Uint8Array[] = [];
  for (let start = 0; start < list.length;) {
    const end = list.indexOf(0, start);
    if (end < 0) break;
    if (end > start) names.push(list.slice(start, end));
    start = end + 1;
  }
  return names;
}

/** An extended attribute's name and value. */
export type Xattr = [Uint8Array, Uint8Array];

/** A symlink's path for the l*xattr calls, through /proc/self/fd/DIR/NAME. */
function linkPath(file: Exclude<Target, number>): Uint8Array {
  const dir = new TextEncoder().encode(`/proc/self/fd/${file.dirFd}/`);
  return cString(new Uint8Array([...dir, ...file.name]));
}

/** Extended attribute names and values, in listxattr's order (f*xattr, or l*xattr of a link). */
export function readXattrs(file: Target): Outcome<Xattr[]> {
  const path = typeof file === "number" ? null : linkPath(file);
  const fd = typeof file === "number" ? file : -1;
  const list = (into: Uint8Array | null, size: number) =>
    Number(
      path === null
        ? libc.flistxattr(fd, into, BigInt(size))
        : libc.llistxattr(path, into, BigInt(size)),
    );
  const get = (name: Uint8Array, into: Uint8Array | null, size: number) =>
    Number(
      path === null
        ? libc.fgetxattr(fd, name, into, BigInt(size))
        : libc.lgetxattr(path, name, into, BigInt(size)),
    );
  const size = list(null, 0);
  if (size < 0) return { ok: false, errno: errno() };
  if (size === 0) return { ok: true, value: [] };
  const names = new Uint8Array(size);
  const n = list(names, size);
  if (n < 0) return { ok: false, errno: errno() };
  const pairs: Xattr[] = [];
  for (const name of splitNames(names.subarray(0, n))) {
    const cname = cString(name);
    const length = get(cname, null, 0);
    if (length < 0) continue; // removed meanwhile: nothing to copy
    const value = new Uint8Array(length);
    const got = get(cname, value, length);
    if (got >= 0) pairs.push([name, value.subarray(0, got)]);
  }
  return { ok: true, value: pairs };
}

export function writeXattr(file: Target, attr: Uint8Array, value: Uint8Array): CallResult {
  const size = BigInt(value.length);
  return checked(
    typeof file === "number"
      ? libc.fsetxattr(file, cString(attr), value, size, 0)
      : libc.lsetxattr(linkPath(file), cString(attr), value, size, 0),
  );
}

/** The soft limit of open files raised to the hard one: a deep tree holds one per level. */
export function raiseFileLimit(): void {
  const { soft, hard } = fileLimit();
  if (soft !== hard) setFileLimit({ soft: hard, hard });
}
