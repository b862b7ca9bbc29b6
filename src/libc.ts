/**
 * The only `Deno.dlopen` in denit: typed wrappers over the libc calls a PID 1 needs.
 *
 * Every wrapper reads errno right after its call and returns a discriminated union, never a
 * sentinel int. Layouts assume Linux glibc on a 64-bit target (x86_64, aarch64).
 */

/**
 * Symbols every supervising denit uses, opened at load. Deno prepares a call trampoline per
 * symbol (0.1 to 0.6 ms each), so everything else is in groups opened on first use.
 */
const SYMBOLS = {
  posix_spawn: {
    parameters: [
      "buffer", // pid_t *pid
      "buffer", // const char *path
      "buffer", // const posix_spawn_file_actions_t *file_actions (NULL: none)
      "buffer", // const posix_spawnattr_t *attrp
      "buffer", // char *const argv[]
      "pointer", // char *const envp[]
    ],
    result: "i32", // int: 0 or an errno value
  },
  waitpid: {
    parameters: ["i32", "buffer", "i32"], // pid_t pid, int *wstatus, int options
    result: "i32", // pid_t
  },
  // The same call on a worker thread: a pending promise that keeps the event loop alive.
  waitpid_blocking: {
    name: "waitpid",
    parameters: ["i32", "buffer", "i32"], // pid_t pid, int *wstatus, int options
    result: "i32", // pid_t
    nonblocking: true,
  },
  kill: { parameters: ["i32", "i32"], result: "i32" }, // pid_t pid, int sig
  prctl: {
    // int option, unsigned long arg2..arg5 (variadic in C; integer registers on Linux ABIs)
    parameters: ["i32", "u64", "u64", "u64", "u64"],
    result: "i32",
  },
  signal: {
    parameters: ["i32", "usize"], // int signum, sighandler_t handler
    result: "usize", // sighandler_t
  },
  access: { parameters: ["buffer", "i32"], result: "i32" }, // const char *pathname, int mode
  __errno_location: { parameters: [], result: "pointer" }, // int *(void)
  environ: { type: "pointer" }, // extern char **environ (Deno gives its address: char ***)
} as const satisfies Deno.ForeignLibraryInterface;

/** Handing the terminal to the child: only when stdin is a terminal. */
const TERMINAL_SYMBOLS = {
  tcgetpgrp: { parameters: ["i32"], result: "i32" }, // int fd
  posix_spawn_file_actions_init: { parameters: ["buffer"], result: "i32" }, // actions *fa
  posix_spawn_file_actions_destroy: { parameters: ["buffer"], result: "i32" }, // actions *fa
  // glibc 2.35+: make the child's process group the terminal's foreground group before exec.
  posix_spawn_file_actions_addtcsetpgrp_np: {
    parameters: ["buffer", "i32"], // posix_spawn_file_actions_t *fa, int tcfd
    result: "i32",
    optional: true,
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** Error messages: only when something failed. */
const MESSAGE_SYMBOLS = {
  strerror: { parameters: ["i32"], result: "pointer" }, // int errnum
} as const satisfies Deno.ForeignLibraryInterface;

/**
 * Copy mode's symbols (init.ts): the kernel's copy paths and metadata calls on descriptors.
 * A second library handle, opened on first use: every symbol costs start-up time (Deno
 * prepares a call trampoline for each), which a supervising denit need not pay.
 */
const FILE_SYMBOLS = {
  open: { parameters: ["buffer", "i32", "u32"], result: "i32" }, // const char *path, int flags, mode_t mode
  close: { parameters: ["i32"], result: "i32" }, // int fd
  copy_file_range: {
    // int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags
    parameters: ["i32", "pointer", "i32", "pointer", "usize", "u32"],
    result: "isize", // ssize_t
  },
  copy_file_range_blocking: {
    name: "copy_file_range",
    parameters: ["i32", "pointer", "i32", "pointer", "usize", "u32"], // as copy_file_range
    result: "isize",
    nonblocking: true,
  },
  sendfile: {
    parameters: ["i32", "i32", "pointer", "usize"], // int out_fd, int in_fd, off_t *offset, size_t count
    result: "isize", // ssize_t
  },
  fchmod: { parameters: ["i32", "u32"], result: "i32" }, // int fd, mode_t mode
  fchown: { parameters: ["i32", "u32", "u32"], result: "i32" }, // int fd, uid_t owner, gid_t group
  fchownat: {
    parameters: ["i32", "buffer", "u32", "u32", "i32"], // int dirfd, const char *path, uid_t, gid_t, int flags
    result: "i32",
  },
  futimens: { parameters: ["i32", "buffer"], result: "i32" }, // int fd, const struct timespec times[2]
  utimensat: {
    parameters: ["i32", "buffer", "buffer", "i32"], // int dirfd, const char *path, const struct timespec times[2], int flags
    result: "i32",
  },
  fchmodat: {
    parameters: ["i32", "buffer", "u32", "i32"], // int dirfd, const char *path, mode_t mode, int flags
    result: "i32",
  },
  fsync: { parameters: ["i32"], result: "i32" }, // int fd
  rename: { parameters: ["buffer", "buffer"], result: "i32" }, // const char *oldpath, const char *newpath
  statx: {
    parameters: ["i32", "buffer", "i32", "u32", "buffer"], // int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

function openLibc<S extends Deno.ForeignLibraryInterface>(symbols: S): Deno.DynamicLibrary<S> {
  try {
    return Deno.dlopen("libc.so.6", symbols);
  } catch (err: unknown) {
    throw new Error("Cannot load the C library libc.so.6", { cause: err });
  }
}

const libc = openLibc(SYMBOLS);

/** A symbol group opened on first use. */
function lazy<S extends Deno.ForeignLibraryInterface>(
  symbols: S,
): () => Deno.DynamicLibrary<S>["symbols"] {
  let opened: Deno.DynamicLibrary<S> | null = null;
  return () => (opened ??= openLibc(symbols)).symbols;
}

const terminal = lazy(TERMINAL_SYMBOLS);
const messages = lazy(MESSAGE_SYMBOLS);
const files = lazy(FILE_SYMBOLS);

/** errno values denit reacts to (asm-generic/errno-base.h). */
export const Errno = Object.freeze({
  EPERM: 1,
  ENOENT: 2,
  ESRCH: 3,
  EINTR: 4,
  ENOEXEC: 8,
  ECHILD: 10,
  EACCES: 13,
  ENOTTY: 25,
});

const WNOHANG = 1; // sys/wait.h
const POSIX_SPAWN_SETPGROUP = 0x02; // spawn.h
const POSIX_SPAWN_SETSIGDEF = 0x04; // spawn.h
const POSIX_SPAWN_SETSIGMASK = 0x08; // spawn.h
const PR_SET_PDEATHSIG = 1; // linux/prctl.h
const PR_SET_CHILD_SUBREAPER = 36; // linux/prctl.h
const SIG_IGN = 1; // bits/signum-generic.h: ((__sighandler_t) 1)
const X_OK = 1; // unistd.h
// glibc sizes on 64-bit Linux are 336 and 80 bytes; the spare room costs nothing.
const SPAWNATTR_BYTES = 512;
const FILE_ACTIONS_BYTES = 256;
const SIGSET_BYTES = 128; // sizeof(sigset_t): 1024 bits

function errno(): number {
  const location = libc.symbols.__errno_location();
  return location === null ? 0 : new Deno.UnsafePointerView(location).getInt32();
}

/** The C library's message for an errno value, e.g. "No such file or directory". */
export function errnoMessage(code: number): string {
  const text = messages().strerror(code);
  return text === null ? `errno ${code}` : Deno.UnsafePointerView.getCString(text);
}

const encoder = new TextEncoder();

/** A NUL-terminated copy of a string or of raw bytes. */
export function cString(value: string | Uint8Array): Uint8Array<ArrayBuffer> {
  const bytes = typeof value === "string" ? encoder.encode(value) : value;
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}

/** How a process ended, decoded from a wait status. */
export type ExitStatus =
  | { kind: "exited"; code: number }
  | { kind: "signaled"; signo: number; coreDumped: boolean };

/** One answer of waitpid(2). */
export type WaitResult =
  | { kind: "reaped"; pid: number; status: ExitStatus }
  | { kind: "none" }
  | { kind: "no-children" }
  | { kind: "failed"; errno: number };

/** Decodes a raw wait status the way the sys/wait.h macros do. */
export function decodeWaitStatus(raw: number): ExitStatus {
  const termsig = raw & 0x7f;
  if (termsig === 0) return { kind: "exited", code: (raw >> 8) & 0xff }; // WIFEXITED, WEXITSTATUS
  // WIFSIGNALED is termsig != 0 && termsig != 0x7f; 0x7f (stopped) needs WUNTRACED, never used.
  return { kind: "signaled", signo: termsig, coreDumped: (raw & 0x80) !== 0 }; // WTERMSIG, WCOREDUMP
}

const drainStatus = new Int32Array(1);

/**
 * waitpid(-1, WNOHANG) without allocating, for draining many zombies: a pid (> 0; its status
 * from `lastDrainedStatus()`), 0 when children remain but none has exited, or -errno.
 */
export function reapNext(): number {
  const pid = libc.symbols.waitpid(-1, drainStatus, WNOHANG);
  return pid >= 0 ? pid : -errno();
}

/** The status of the child `reapNext()` last returned. */
export function lastDrainedStatus(): ExitStatus {
  return decodeWaitStatus(drainStatus[0]);
}

/** waitpid(-1, WNOHANG) as a WaitResult: reaps one terminated child, without blocking. */
export function reapOne(): WaitResult {
  const pid = reapNext();
  if (pid > 0) return { kind: "reaped", pid, status: lastDrainedStatus() };
  if (pid === 0) return { kind: "none" };
  // waitpid(2): ECHILD means the caller has no children left, waited-for or not.
  return pid === -Errno.ECHILD ? { kind: "no-children" } : { kind: "failed", errno: -pid };
}

/**
 * waitpid(-1, 0) on a worker thread: resolves when any child terminates.
 *
 * errno is not readable across threads, so a failure is re-checked with `reapOne()` on this
 * thread, which also reaps a child that exited in between.
 */
export async function waitForAny(): Promise<WaitResult> {
  const status = new Int32Array(1);
  const pid = await libc.symbols.waitpid_blocking(-1, status, 0);
  if (pid > 0) return { kind: "reaped", pid, status: decodeWaitStatus(status[0]) };
  return reapOne();
}

/** Result of a call that only fails with errno. */
export type CallResult = { ok: true } | { ok: false; errno: number };

function checked(rc: number): CallResult {
  return rc === 0 ? { ok: true } : { ok: false, errno: errno() };
}

/** kill(2): pid > 0 one process, pid < -1 a process group, -1 every process we may signal. */
export function sendSignal(pid: number, signo: number): CallResult {
  return checked(libc.symbols.kill(pid, signo));
}

/** prctl(PR_SET_CHILD_SUBREAPER, 1): orphaned descendants are reparented to this process. */
export function becomeSubreaper(): CallResult {
  return checked(libc.symbols.prctl(PR_SET_CHILD_SUBREAPER, 1n, 0n, 0n, 0n));
}

/** prctl(PR_SET_PDEATHSIG, signo): get signo when the parent that started us dies. */
export function setParentDeathSignal(signo: number): CallResult {
  return checked(libc.symbols.prctl(PR_SET_PDEATHSIG, BigInt(signo), 0n, 0n, 0n));
}

/** signal(signo, SIG_IGN) for a signal Deno has no listener on. */
export function ignoreSignal(signo: number): CallResult {
  // SIG_ERR is (sighandler_t) -1.
  const previous = libc.symbols.signal(signo, BigInt(SIG_IGN));
  return previous === 0xffffffffffffffffn ? { ok: false, errno: errno() } : { ok: true };
}

/** True when fd is a terminal that is the controlling terminal of this process. */
export function isControllingTerminal(fd: number): boolean {
  if (fd !== 0 || !Deno.stdin.isTerminal()) return false;
  // tcgetpgrp(3) fails with ENOTTY when fd is not our controlling terminal.
  return terminal().tcgetpgrp(fd) > 0;
}

/** access(path, X_OK): whether this process may execute the file. */
export function canExecute(path: Uint8Array): CallResult {
  return checked(libc.symbols.access(cString(path), X_OK));
}

/** What to start: an executable path (already resolved) and argv, as raw bytes. */
export interface SpawnRequest {
  path: Uint8Array;
  argv: readonly Uint8Array[];
  /** Make the child's new process group the foreground group of this terminal fd. */
  foregroundFd?: number;
}

/** Result of `spawn()`. */
export type SpawnResult =
  | { kind: "spawned"; pid: number }
  | { kind: "failed"; errno: number; stage: "exec" | "foreground" };

/** True when this libc can hand the terminal to the child before it runs (glibc 2.35+). */
export function canSetForegroundOnSpawn(): boolean {
  return terminal().posix_spawn_file_actions_addtcsetpgrp_np !== null;
}

function currentEnviron(): Deno.PointerValue {
  // Read at each spawn: setenv(3) may have moved the array since the library was opened.
  const address = libc.symbols.environ;
  return address === null ? null : new Deno.UnsafePointerView(address).getPointer();
}

function signalSetAll(): Uint8Array<ArrayBuffer> {
  // Every bit of signals 1..64, written directly: sigfillset(3) in glibc leaves out 32 and 33
  // (its internal SIGCANCEL and SIGSETXID), and posix_spawn then leaves those two ignored in
  // the child. With them in the set, the child gets SIG_DFL for every signal.
  const set = new Uint8Array(SIGSET_BYTES);
  set.fill(0xff, 0, 8);
  return set;
}

// glibc's posix_spawnattr_t (spawn.h): short __flags; pid_t __pgrp; sigset_t __sd; sigset_t
// __ss; ... posix_spawnattr_init() only zeroes it and the setters only store into it, so it is
// filled here directly, which saves six symbols at start-up.
const ATTR_FLAGS = 0; // __flags
const ATTR_PGRP = 4; // __pgrp
const ATTR_SIGDEFAULT = 8; // __sd
const ATTR_SIGMASK = 8 + SIGSET_BYTES; // __ss

function spawnAttributes(): Uint8Array<ArrayBuffer> {
  const attr = new Uint8Array(SPAWNATTR_BYTES);
  const view = new DataView(attr.buffer);
  const flags = POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK;
  view.setInt16(ATTR_FLAGS, flags, true);
  view.setInt32(ATTR_PGRP, 0, true); // a new process group led by the child
  attr.set(signalSetAll(), ATTR_SIGDEFAULT);
  attr.fill(0, ATTR_SIGMASK, ATTR_SIGMASK + SIGSET_BYTES); // an empty signal mask
  return attr;
}

/**
 * posix_spawn(3) with the environment of this process (`environ`, byte for byte), a new
 * process group, every signal at its default disposition and an empty signal mask.
 */
export function spawn(request: SpawnRequest): SpawnResult {
  const path = cString(request.path);
  const args = request.argv.map((arg) => cString(arg));
  const argv = new BigUint64Array(args.length + 1); // NULL-terminated char *argv[]
  args.forEach((arg, i) => {
    argv[i] = BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(arg)));
  });
  const foreground = request.foregroundFd !== undefined && canSetForegroundOnSpawn();
  const actions = foreground ? new Uint8Array(FILE_ACTIONS_BYTES) : null;
  if (actions !== null) {
    terminal().posix_spawn_file_actions_init(actions);
    terminal().posix_spawn_file_actions_addtcsetpgrp_np?.(actions, request.foregroundFd ?? 0);
  }
  try {
    const pid = new Int32Array(1);
    const code = libc.symbols.posix_spawn(
      pid,
      path,
      actions,
      spawnAttributes(),
      argv,
      currentEnviron(),
    );
    if (code === 0) return { kind: "spawned", pid: pid[0] };
    // glibc reports a failed file action (here only tcsetpgrp, ENOTTY/EPERM) the same way.
    const stage = foreground && (code === Errno.ENOTTY || code === Errno.EPERM)
      ? "foreground"
      : "exec";
    return { kind: "failed", errno: code, stage };
  } finally {
    if (actions !== null) terminal().posix_spawn_file_actions_destroy(actions);
    // The C strings must outlive posix_spawn: referenced here, they stay reachable until now.
    void args;
    void path;
  }
}

// ---- Copy mode: files by descriptor ------------------------------------------------------

/** A call's value, or the errno it failed with. */
export type Outcome<T> = { ok: true; value: T } | { ok: false; errno: number };

function outcome(rc: number): Outcome<number> {
  return rc >= 0 ? { ok: true, value: rc } : { ok: false, errno: errno() };
}

// fcntl.h: O_DIRECTORY and O_NOFOLLOW differ between x86_64 and the asm-generic arm64 values.
const ARM64 = Deno.build.arch === "aarch64";
const O_WRONLY = 0o1;
const O_CREAT = 0o100;
const O_EXCL = 0o200;
const O_NOFOLLOW = ARM64 ? 0o100000 : 0o400000;
const O_DIRECTORY = ARM64 ? 0o40000 : 0o200000;
const O_CLOEXEC = 0o2000000;
const AT_FDCWD = -100; // fcntl.h
const AT_SYMLINK_NOFOLLOW = 0x100; // fcntl.h
const AT_EMPTY_PATH = 0x1000; // fcntl.h
const O_NONBLOCK = 0o4000; // fcntl.h: opening a FIFO swapped in for a file must not hang
const STATX_BASIC_STATS = 0x7ff; // linux/stat.h
const STATX_BYTES = 256;

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
const statxBuffer = new Uint8Array(STATX_BYTES);
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
  const rc = files().statx(dirfd, path, flags, STATX_BASIC_STATS, buffer);
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

/** open(path, O_RDONLY | O_NOFOLLOW): a symlink is refused (ELOOP), never followed. */
export function openForReading(path: string): Outcome<number> {
  return outcome(files().open(cString(path), O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0));
}

/** open(path, O_CREAT | O_EXCL | O_WRONLY): a new file, never an existing one or a symlink. */
export function createExclusive(path: string, mode: number): Outcome<number> {
  const flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  return outcome(files().open(cString(path), flags, mode));
}

/** open(path, O_RDONLY | O_DIRECTORY), for fsync of a directory. */
export function openDirectory(path: string): Outcome<number> {
  return outcome(files().open(cString(path), O_DIRECTORY | O_CLOEXEC, 0));
}

/** close(2). */
export function closeFd(fd: number): void {
  // close(2): even on EINTR the descriptor is released on Linux; nothing to retry.
  files().close(fd);
}

/** copy_file_range(2) of up to `length` bytes at the current offsets; 0 at end of input. */
export function copyRange(input: number, output: number, length: number): Outcome<number> {
  return outcome(
    Number(files().copy_file_range(input, null, output, null, BigInt(length), 0)),
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
    await files().copy_file_range_blocking(input, null, output, null, BigInt(length), 0),
  );
  return n >= 0 ? { ok: true, value: n } : { ok: false, errno: 0 };
}

/** sendfile(2): the fallback where copy_file_range is refused (EXDEV, EINVAL, ENOSYS). */
export function sendFile(output: number, input: number, length: number): Outcome<number> {
  return outcome(Number(files().sendfile(output, input, null, BigInt(length))));
}

function timespecs(atime: Timestamp, mtime: Timestamp): Uint8Array<ArrayBuffer> {
  const times = new BigInt64Array([atime.sec, BigInt(atime.nsec), mtime.sec, BigInt(mtime.nsec)]);
  return new Uint8Array(times.buffer); // struct timespec times[2]
}

/** fchmod(2). */
export function setFdMode(fd: number, mode: number): CallResult {
  return checked(files().fchmod(fd, mode));
}

/** fchown(2). */
export function setFdOwner(fd: number, uid: number, gid: number): CallResult {
  return checked(files().fchown(fd, uid, gid));
}

/** futimens(2): access and modification times, to the nanosecond. */
export function setFdTimes(fd: number, atime: Timestamp, mtime: Timestamp): CallResult {
  return checked(files().futimens(fd, timespecs(atime, mtime)));
}

/** utimensat(2) on the path itself (a symlink's own times, not its target's). */
export function setPathTimes(path: string, atime: Timestamp, mtime: Timestamp): CallResult {
  const rc = files().utimensat(
    AT_FDCWD,
    cString(path),
    timespecs(atime, mtime),
    AT_SYMLINK_NOFOLLOW,
  );
  return checked(rc);
}

/** fchownat(2) on the path itself (lchown for a symlink). */
export function setPathOwner(path: string, uid: number, gid: number): CallResult {
  return checked(files().fchownat(AT_FDCWD, cString(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

/** chmod(2) of a path (directories; never used on a symlink). */
export function setPathMode(path: string, mode: number): CallResult {
  return checked(files().fchmodat(AT_FDCWD, cString(path), mode, 0));
}

/** fsync(2). */
export function syncFd(fd: number): CallResult {
  return checked(files().fsync(fd));
}

/** rename(2): atomic replacement of `to`, which is never followed if it is a symlink. */
export function renamePath(from: string, to: string): CallResult {
  return checked(files().rename(cString(from), cString(to)));
}
