/** The only `Deno.dlopen` in denit: libc's symbols, declared once each, in groups. */

/** What every start of the supervisor calls: looked up at load. */
const START = {
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
  posix_spawnattr_init: { parameters: ["buffer"], result: "i32" }, // posix_spawnattr_t *attr
  posix_spawnattr_destroy: { parameters: ["buffer"], result: "i32" }, // posix_spawnattr_t *attr
  posix_spawnattr_setflags: { parameters: ["buffer", "i16"], result: "i32" }, // attr, short flags
  posix_spawnattr_setpgroup: { parameters: ["buffer", "i32"], result: "i32" }, // attr, pid_t pgroup
  // posix_spawnattr_t *attr, const sigset_t *sigdefault
  posix_spawnattr_setsigdefault: { parameters: ["buffer", "buffer"], result: "i32" },
  // posix_spawnattr_t *attr, const sigset_t *sigmask
  posix_spawnattr_setsigmask: { parameters: ["buffer", "buffer"], result: "i32" },
  waitpid: { parameters: ["i32", "buffer", "i32"], result: "i32" }, // pid_t, int *wstatus, options
  // int option, unsigned long arg2..arg5 (variadic in C; integer registers on Linux ABIs)
  prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"], result: "i32" },
  // pid_t pid, int resource, const struct rlimit *new_limit, struct rlimit *old_limit
  prlimit: { parameters: ["i32", "i32", "buffer", "buffer"], result: "i32" },
  access: { parameters: ["buffer", "i32"], result: "i32" }, // const char *pathname, int mode
  signalfd: { parameters: ["i32", "buffer", "i32"], result: "i32" }, // fd, const sigset_t *, flags
  // int poll(struct pollfd *fds, nfds_t nfds, int timeout): waits on a thread of the runtime.
  poll: { parameters: ["buffer", "u64", "i32"], result: "i32", nonblocking: true },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" }, // int fd, void *buf, count
  // int pthread_sigmask(int how, const sigset_t *set, sigset_t *oldset): this thread's mask.
  pthread_sigmask: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  environ: { type: "pointer" }, // extern char **environ (Deno gives its address: char ***)
  __errno_location: { parameters: [], result: "pointer" }, // int *(void): errno's address
} as const satisfies Deno.ForeignLibraryInterface;

/** The rest of process control: jobs' spawns, terminals, descriptors, the environment. */
const PROCESS = {
  posix_spawn_file_actions_init: { parameters: ["buffer"], result: "i32" }, // actions *fa
  posix_spawn_file_actions_destroy: { parameters: ["buffer"], result: "i32" }, // actions *fa
  // glibc 2.35+: make the child's process group the terminal's foreground group before exec.
  posix_spawn_file_actions_addtcsetpgrp_np: {
    parameters: ["buffer", "i32"], // posix_spawn_file_actions_t *fa, int tcfd
    result: "i32",
    optional: true,
  },
  // idtype_t idtype, id_t id, siginfo_t *infop, int options (WNOHANG: never waits)
  waitid: { parameters: ["i32", "u32", "buffer", "i32"], result: "i32" },
  kill: { parameters: ["i32", "i32"], result: "i32" }, // pid_t pid, int sig
  tcgetpgrp: { parameters: ["i32"], result: "i32" }, // int fd
  close: { parameters: ["i32"], result: "i32" }, // int fd
  dup2: { parameters: ["i32", "i32"], result: "i32" }, // int oldfd, int newfd
  // int setenv(const char *name, const char *value, int overwrite): raw bytes, not only UTF-8.
  setenv: { parameters: ["buffer", "buffer", "i32"], result: "i32" },
  strerror: { parameters: ["i32"], result: "pointer" }, // int errnum
} as const satisfies Deno.ForeignLibraryInterface;

/** Copy mode: files by descriptor. */
const FILES = {
  openat: { parameters: ["i32", "buffer", "i32", "u32"], result: "i32" }, // fd, path, flags, mode
  mkdirat: { parameters: ["i32", "buffer", "u32"], result: "i32" }, // int dirfd, path, mode_t
  symlinkat: { parameters: ["buffer", "i32", "buffer"], result: "i32" }, // target, dirfd, path
  // int dirfd, path, char *buf, size_t size
  readlinkat: { parameters: ["i32", "buffer", "buffer", "usize"], result: "isize" },
  // int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int flags
  linkat: { parameters: ["i32", "buffer", "i32", "buffer", "i32"], result: "i32" },
  // int olddirfd, old, int newdirfd, new
  renameat: { parameters: ["i32", "buffer", "i32", "buffer"], result: "i32" },
  unlinkat: { parameters: ["i32", "buffer", "i32"], result: "i32" }, // int dirfd, path, int flags
  getdents64: { parameters: ["i32", "buffer", "usize"], result: "isize" }, // fd, void *dirp, count
  copy_file_range: {
    // int fd_in, loff_t *off_in, int fd_out, loff_t *off_out, size_t len, unsigned int flags
    parameters: ["i32", "buffer", "i32", "buffer", "usize", "u32"],
    result: "isize", // ssize_t
  },
  copy_file_range_blocking: {
    name: "copy_file_range",
    parameters: ["i32", "buffer", "i32", "buffer", "usize", "u32"], // as copy_file_range
    result: "isize",
    nonblocking: true,
  },
  // int out_fd, int in_fd, off_t *offset, size_t
  sendfile: { parameters: ["i32", "i32", "buffer", "usize"], result: "isize" },
  // int fd, void *buf, size_t count, off_t offset
  pread: { parameters: ["i32", "buffer", "usize", "i64"], result: "isize" },
  lseek: { parameters: ["i32", "i64", "i32"], result: "i64" }, // int fd, off_t offset, int whence
  ftruncate: { parameters: ["i32", "i64"], result: "i32" }, // int fd, off_t length
  fchmod: { parameters: ["i32", "u32"], result: "i32" }, // int fd, mode_t mode
  fchown: { parameters: ["i32", "u32", "u32"], result: "i32" }, // int fd, uid_t owner, gid_t group
  // int dirfd, path, uid_t, gid_t, int flags
  fchownat: { parameters: ["i32", "buffer", "u32", "u32", "i32"], result: "i32" },
  futimens: { parameters: ["i32", "buffer"], result: "i32" }, // int fd, const timespec times[2]
  // int dirfd, path, const timespec[2], flags
  utimensat: { parameters: ["i32", "buffer", "buffer", "i32"], result: "i32" },
  fsync: { parameters: ["i32"], result: "i32" }, // int fd
  // int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf
  statx: { parameters: ["i32", "buffer", "i32", "u32", "buffer"], result: "i32" },
  flistxattr: { parameters: ["i32", "buffer", "usize"], result: "isize" }, // int fd, list, size
  // int fd, const char *name, void *v, size
  fgetxattr: { parameters: ["i32", "buffer", "buffer", "usize"], result: "isize" },
  // fd, name, const void *v, size, flags
  fsetxattr: { parameters: ["i32", "buffer", "buffer", "usize", "i32"], result: "i32" },
  llistxattr: { parameters: ["buffer", "buffer", "usize"], result: "isize" }, // path, list, size
  // path, const char *name, void *v, size
  lgetxattr: { parameters: ["buffer", "buffer", "buffer", "usize"], result: "isize" },
  // path, name, value, size, flags
  lsetxattr: { parameters: ["buffer", "buffer", "buffer", "usize", "i32"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

/** The jobs: pipes, file actions, the output pump. */
const JOBS = {
  pipe2: { parameters: ["buffer", "i32"], result: "i32" }, // int pipefd[2], int flags
  // int fcntl(int fd, int cmd, ... /* int arg */): one int in the integer registers.
  fcntl: { parameters: ["i32", "i32", "i32"], result: "i32" },
  open: { parameters: ["buffer", "i32", "u32"], result: "i32" }, // const char *path, flags, mode
  write: { parameters: ["i32", "buffer", "usize"], result: "isize" }, // fd, const void *buf, count
  // posix_spawn_file_actions_t *fa, int fd, int newfd
  posix_spawn_file_actions_adddup2: { parameters: ["buffer", "i32", "i32"], result: "i32" },
} as const satisfies Deno.ForeignLibraryInterface;

/** One thread's credentials. */
const CREDENTIALS = {
  // long syscall(long number, ...): the raw calls, which change the calling thread only.
  syscall: { parameters: ["i64", "i64", "i64", "i64"], result: "i64" },
} as const satisfies Deno.ForeignLibraryInterface;

/** The sd_notify socket, the job socket and the job service's control channel. */
const SOCKETS = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" }, // int domain, type, protocol
  bind: { parameters: ["i32", "buffer", "u32"], result: "i32" }, // fd, const sockaddr *, len
  listen: { parameters: ["i32", "i32"], result: "i32" }, // int sockfd, int backlog
  // fd, level, optname, const void *, len
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  // ssize_t recvmsg(int fd, struct msghdr *msg, int flags): blocks on a thread of the runtime.
  recvmsg: { parameters: ["i32", "buffer", "i32"], result: "isize", nonblocking: true },
  shutdown: { parameters: ["i32", "i32"], result: "i32" }, // int sockfd, int how
} as const satisfies Deno.ForeignLibraryInterface;

/** Memory given back once the child runs: the heap's free pages, the runtime's code pages. */
const MEMORY = {
  // int malloc_trim(size_t pad): free heap pages back to the kernel, on a thread of the runtime.
  malloc_trim: { parameters: ["usize"], result: "i32", nonblocking: true },
  // int madvise(void *addr, size_t length, int advice): addresses from /proc/self/maps. On a
  // thread of the runtime: zapping the runtime's page tables takes a while.
  madvise: { parameters: ["usize", "usize", "i32"], result: "i32", nonblocking: true },
} as const satisfies Deno.ForeignLibraryInterface;

/** A group's addresses are looked up together, at the first use of any of its members. */
const GROUPS = [START, PROCESS, FILES, JOBS, CREDENTIALS, SOCKETS, MEMORY] as const;
const ALL = { ...START, ...PROCESS, ...FILES, ...JOBS, ...CREDENTIALS, ...SOCKETS, ...MEMORY };
export const LIBC_SYMBOLS: typeof ALL = ALL;

/** The C library's functions and variables as Deno binds them. */
export type Libc = Deno.DynamicLibrary<typeof LIBC_SYMBOLS>["symbols"];

const LIBC = "libc.so.6";

/** Calls through the generic path before a symbol gets a compiled trampoline of its own. */
const CALLS_BEFORE_COMPILING = 64;

interface Named {
  readonly name?: string;
  readonly optional?: boolean;
}

/** A group's addresses (statics: nothing compiled), looked up in one `Deno.dlopen`. */
function lookUp(group: Deno.ForeignLibraryInterface): Record<string, Deno.PointerValue> {
  const statics: Record<string, Deno.ForeignStatic> = {};
  for (const [key, definition] of Object.entries(group)) {
    const { name, optional } = definition as Named;
    statics[key] = {
      type: "pointer",
      ...(name === undefined ? {} : { name }),
      ...(optional === undefined ? {} : { optional }),
    } as Deno.ForeignStatic;
  }
  try {
    return Deno.dlopen(LIBC, statics).symbols as Record<string, Deno.PointerValue>;
  } catch (err: unknown) {
    const detail = err instanceof Error ? err.message.split("\n")[0] : String(err);
    throw new Error(`Cannot load the C library ${LIBC}: ${detail}`, { cause: err });
  }
}

/**
 * A function is called through `Deno.UnsafeFnPointer` until its CALLS_BEFORE_COMPILING-th call,
 * then through a compiled trampoline; a variable is its address; a missing optional one, null.
 */
function bind(
  key: string,
  definition: Deno.ForeignFunction | Deno.ForeignStatic,
  address: Deno.PointerValue,
  replace: (bound: unknown) => void,
): unknown {
  if (!("parameters" in definition) || address === null) return address;
  const pointer = new Deno.UnsafeFnPointer(
    address as Deno.PointerObject<typeof definition>,
    definition,
  );
  let calls = 0;
  return (...args: unknown[]) => {
    if (++calls === CALLS_BEFORE_COMPILING) {
      replace(Deno.dlopen(LIBC, { [key]: definition }).symbols[key]);
    }
    return (pointer.call as (...a: unknown[]) => unknown)(...args);
  };
}

/**
 * `Deno.dlopen` compiles a trampoline for every function it names, most called once or never:
 * a Proxy binds each at first use. The start group is looked up at load (one Error without libc).
 */
function openLibc(): Libc {
  const addresses = new Map<Deno.ForeignLibraryInterface, Record<string, Deno.PointerValue>>();
  addresses.set(START, lookUp(START));
  const bound: Record<string, unknown> = {};
  return new Proxy(bound, {
    get: (table, key) => {
      if (typeof key !== "string") return undefined;
      const value = table[key];
      if (value !== undefined) return value;
      const group: Deno.ForeignLibraryInterface | undefined = GROUPS.find((candidate) =>
        Object.hasOwn(candidate, key)
      );
      const definition = group?.[key];
      if (group === undefined || definition === undefined) return undefined;
      let found = addresses.get(group);
      if (found === undefined) addresses.set(group, found = lookUp(group));
      const replace = (fn: unknown) => {
        table[key] = fn;
      };
      return table[key] = bind(key, definition, found[key] ?? null, replace);
    },
  }) as Libc;
}

/** Per thread, as every module is. */
export const libc: Libc = openLibc();

/** A NUL-terminated copy of a string (its UTF-8) or of raw bytes: a C string. */
export function cString(value: string | Uint8Array): Uint8Array<ArrayBuffer> {
  const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}

/** close(2): Linux releases the descriptor even when it reports an error; nothing to retry. */
export function closeFd(fd: number): void {
  libc.close(fd);
}

/** The address of a buffer's first byte, as a C pointer's value (for structs that hold pointers). */
export function addressOf(buffer: BufferSource): bigint {
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(buffer)));
}

/** The errno values denit reacts to (asm-generic/errno-base.h, errno.h). */
export const Errno = Object.freeze({
  EPERM: 1,
  ENOENT: 2,
  ESRCH: 3,
  EINTR: 4,
  ENOEXEC: 8,
  EBADF: 9,
  ECHILD: 10,
  EAGAIN: 11,
  EEXIST: 17,
  EXDEV: 18,
  EINVAL: 22,
  ENOTTY: 25,
  ENOSYS: 38,
  ENOTSUP: 95,
});

/** The calling thread's errno: read right after the failing call, on the same thread. */
export function errno(): number {
  const pointer = libc.__errno_location();
  return pointer === null ? 0 : new Deno.UnsafePointerView(pointer).getInt32();
}

/** Result of a call that only fails with errno. */
export type CallResult = { ok: true } | { ok: false; errno: number };

/** A call's return code as a CallResult (0: done; else errno, read at once). */
export function checked(rc: number): CallResult {
  return rc === 0 ? { ok: true } : { ok: false, errno: errno() };
}

/** The C library's message for an errno value, e.g. "No such file or directory". */
export function errnoMessage(code: number): string {
  const text = libc.strerror(code);
  return text === null ? `errno ${code}` : Deno.UnsafePointerView.getCString(text);
}
