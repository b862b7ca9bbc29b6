/**
 * glibc's struct sizes, offsets and constants on 64-bit Linux, shared by x86_64 and aarch64 but
 * for ARCH_CONSTANTS; tests/layout_test.ts checks them against the C headers.
 */

const ARM64 = Deno.build.arch === "aarch64";

/** sizeof(sigset_t) in glibc: 1024 bits, of which the kernel uses the first 64. */
export const SIGSET_BYTES = 128;
/** sizeof(posix_spawnattr_t): 336 on x86_64 and aarch64 (glibc 2.x, LP64). */
export const SPAWNATTR_BYTES = 336;
/** sizeof(posix_spawn_file_actions_t): 80 on LP64. */
export const FILE_ACTIONS_BYTES = 80;

/** sizeof(siginfo_t) and the fields waitid(2) fills (asm-generic/siginfo.h, LP64). */
export const SIGINFO = Object.freeze({ bytes: 128, signo: 0, code: 8, pid: 16, status: 24 });

/** struct rlimit: two rlim_t (unsigned long). */
export const RLIMIT = Object.freeze({ bytes: 16, cur: 0, max: 8 });
/** struct signalfd_siginfo (linux/signalfd.h), the same on both: ssi_signo first. */
export const SIGNALFD_SIGINFO = Object.freeze({ bytes: 128, signo: 0 });
/** struct pollfd { int fd; short events; short revents; } */
export const POLLFD = Object.freeze({ bytes: 8, fd: 0, events: 4, revents: 6 });

/** struct statx (linux/stat.h), the fields copy mode reads. */
export const STATX = Object.freeze({
  bytes: 256,
  nlink: 16,
  uid: 20,
  gid: 24,
  mode: 28,
  ino: 32,
  size: 40,
  blocks: 48,
  atime: 64,
  mtime: 112,
  devMajor: 136,
  devMinor: 140,
});

/** struct msghdr (sys/socket.h) for recvmsg(2). */
export const MSGHDR = Object.freeze({
  bytes: 56,
  iov: 16,
  iovlen: 24,
  control: 32,
  controllen: 40,
});
/** struct iovec (sys/uio.h). */
export const IOVEC = Object.freeze({ bytes: 16, base: 0, len: 8 });
/** struct cmsghdr and a control message carrying a struct ucred (SCM_CREDENTIALS). */
export const CMSG = Object.freeze({ level: 8, type: 12, data: 16, ucredSpace: 32 });
/** struct ucred (sys/socket.h, _GNU_SOURCE). */
export const UCRED = Object.freeze({ bytes: 12, pid: 0, uid: 4, gid: 8 });

/** struct linux_dirent64 (getdents64(2)). */
export const DIRENT64 = Object.freeze({ ino: 0, reclen: 16, type: 18, name: 19 });

/** Per architecture: O_DIRECTORY, O_NOFOLLOW, the numbers of calls glibc wraps process-wide. */
export const ARCH_CONSTANTS = Object.freeze({
  x86_64: Object.freeze({
    directory: 0o200000,
    nofollow: 0o400000,
    setgroups: 116,
    setresuid: 117,
    setresgid: 119,
  }),
  aarch64: Object.freeze({
    directory: 0o40000,
    nofollow: 0o100000,
    setgroups: 159,
    setresuid: 147,
    setresgid: 149,
  }),
});

const THIS_ARCH = ARCH_CONSTANTS[ARM64 ? "aarch64" : "x86_64"];

/** open(2) flags (fcntl.h); O_DIRECTORY and O_NOFOLLOW differ on arm64 (asm/fcntl.h). */
export const O = Object.freeze({
  RDONLY: 0o0,
  WRONLY: 0o1,
  RDWR: 0o2,
  CREAT: 0o100,
  EXCL: 0o200,
  NONBLOCK: 0o4000,
  DIRECTORY: THIS_ARCH.directory,
  NOFOLLOW: THIS_ARCH.nofollow,
  CLOEXEC: 0o2000000,
});

/** System call numbers (asm/unistd.h) for the calls glibc wraps process-wide. */
const { setgroups, setresuid, setresgid } = THIS_ARCH;
export const SYS = Object.freeze({ setgroups, setresuid, setresgid });

/** Socket constants (sys/socket.h, asm-generic/socket.h, linux/socket.h): the same on both. */
export const SOCKET = Object.freeze({
  AF_UNIX: 1,
  STREAM: 1,
  DGRAM: 2,
  /** SOCK_CLOEXEC: only what a spawn's dup2 puts in place is inherited. */
  CLOEXEC: 0o2000000,
  SOL_SOCKET: 1,
  SHUT_RDWR: 2,
});

/** struct sockaddr_un { sa_family_t sun_family; char sun_path[108]; }: sun_path's offset and size. */
const SOCKADDR_UN = Object.freeze({ path: 2, pathBytes: 108 });

/** A sockaddr_un for a path or (`abstract`) an abstract name; RangeError if it does not fit. */
export function unixAddress(name: Uint8Array, abstract: boolean): Uint8Array<ArrayBuffer> {
  if (name.length + 1 > SOCKADDR_UN.pathBytes) throw new RangeError("socket name too long");
  const address = new Uint8Array(SOCKADDR_UN.path + 1 + name.length);
  new DataView(address.buffer).setUint16(0, SOCKET.AF_UNIX, true);
  address.set(name, SOCKADDR_UN.path + (abstract ? 1 : 0));
  return address;
}
