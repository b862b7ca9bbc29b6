/**
 * The struct layouts and constants of src/sys/layout.ts against the C library's headers on this
 * machine (a C program built here prints them), and aarch64's system call numbers against the
 * kernel's generic table.
 */

import { assertEquals, defined } from "./assert.ts";
import { run } from "./helpers.ts";
import {
  ARCH_CONSTANTS,
  CMSG,
  DIRENT64,
  FILE_ACTIONS_BYTES,
  IOVEC,
  MSGHDR,
  O,
  RLIMIT,
  SIGINFO,
  SIGSET_BYTES,
  SPAWNATTR_BYTES,
  STATX,
  SYS,
  UCRED,
} from "../src/sys/layout.ts";

const PROGRAM = `
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
int main(void) {
  printf("{\\"spawnattr\\":%zu,\\"fileActions\\":%zu,\\"sigset\\":%zu,", sizeof(posix_spawnattr_t),
         sizeof(posix_spawn_file_actions_t), sizeof(sigset_t));
  printf("\\"siginfo\\":{\\"bytes\\":%zu,\\"signo\\":%zu,\\"code\\":%zu,\\"pid\\":%zu,\\"status\\":%zu},",
         sizeof(siginfo_t), offsetof(siginfo_t, si_signo), offsetof(siginfo_t, si_code),
         offsetof(siginfo_t, si_pid), offsetof(siginfo_t, si_status));
  printf("\\"rlimit\\":{\\"bytes\\":%zu,\\"cur\\":%zu,\\"max\\":%zu},", sizeof(struct rlimit),
         offsetof(struct rlimit, rlim_cur), offsetof(struct rlimit, rlim_max));
  printf("\\"statx\\":{\\"bytes\\":%zu,\\"nlink\\":%zu,\\"uid\\":%zu,\\"gid\\":%zu,\\"mode\\":%zu,\\"ino\\":%zu,"
         "\\"size\\":%zu,\\"blocks\\":%zu,\\"atime\\":%zu,\\"mtime\\":%zu,\\"devMajor\\":%zu,\\"devMinor\\":%zu},",
         sizeof(struct statx), offsetof(struct statx, stx_nlink), offsetof(struct statx, stx_uid),
         offsetof(struct statx, stx_gid), offsetof(struct statx, stx_mode), offsetof(struct statx, stx_ino),
         offsetof(struct statx, stx_size), offsetof(struct statx, stx_blocks),
         offsetof(struct statx, stx_atime), offsetof(struct statx, stx_mtime),
         offsetof(struct statx, stx_dev_major), offsetof(struct statx, stx_dev_minor));
  printf("\\"dirent64\\":{\\"ino\\":%zu,\\"reclen\\":%zu,\\"type\\":%zu,\\"name\\":%zu},",
         offsetof(struct dirent64, d_ino), offsetof(struct dirent64, d_reclen),
         offsetof(struct dirent64, d_type), offsetof(struct dirent64, d_name));
  printf("\\"O\\":{\\"RDONLY\\":%d,\\"WRONLY\\":%d,\\"RDWR\\":%d,\\"CREAT\\":%d,\\"EXCL\\":%d,\\"NONBLOCK\\":%d,"
         "\\"DIRECTORY\\":%d,\\"NOFOLLOW\\":%d,\\"CLOEXEC\\":%d},",
         O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_NONBLOCK, O_DIRECTORY, O_NOFOLLOW,
         O_CLOEXEC);
  printf("\\"msghdr\\":{\\"bytes\\":%zu,\\"iov\\":%zu,\\"iovlen\\":%zu,\\"control\\":%zu,\\"controllen\\":%zu},",
         sizeof(struct msghdr), offsetof(struct msghdr, msg_iov), offsetof(struct msghdr, msg_iovlen),
         offsetof(struct msghdr, msg_control), offsetof(struct msghdr, msg_controllen));
  printf("\\"iovec\\":{\\"bytes\\":%zu,\\"base\\":%zu,\\"len\\":%zu},", sizeof(struct iovec),
         offsetof(struct iovec, iov_base), offsetof(struct iovec, iov_len));
  printf("\\"cmsg\\":{\\"level\\":%zu,\\"type\\":%zu,\\"data\\":%zu,\\"ucredSpace\\":%zu},",
         offsetof(struct cmsghdr, cmsg_level), offsetof(struct cmsghdr, cmsg_type),
         (size_t)CMSG_LEN(0), (size_t)CMSG_SPACE(sizeof(struct ucred)));
  printf("\\"ucred\\":{\\"bytes\\":%zu,\\"pid\\":%zu,\\"uid\\":%zu,\\"gid\\":%zu},", sizeof(struct ucred),
         offsetof(struct ucred, pid), offsetof(struct ucred, uid), offsetof(struct ucred, gid));
  printf("\\"SYS\\":{\\"setgroups\\":%d,\\"setresuid\\":%d,\\"setresgid\\":%d}}\\n", SYS_setgroups,
         SYS_setresuid, SYS_setresgid);
  return 0;
}
`;

Deno.test("struct layouts and constants match this machine's C library", async () => {
  const dir = await Deno.makeTempDir({ prefix: "denit-layout-" });
  try {
    await Deno.writeTextFile(`${dir}/layout.c`, PROGRAM);
    // Under emulation (the aarch64 lane) the reference is built for the runtime's machine too.
    const emulated = Deno.env.get("LANE_EMULATED") !== undefined;
    const cc = emulated ? [`${Deno.build.arch}-linux-gnu-gcc`, "-static"] : ["gcc"];
    const built = await run([...cc, "-O0", "-o", `${dir}/layout`, `${dir}/layout.c`]);
    assertEquals(built.code, 0, built.stderr);
    const runner = emulated ? [`qemu-${Deno.build.arch}-static`] : [];
    const c = JSON.parse((await run([...runner, `${dir}/layout`])).stdout);
    assertEquals(SPAWNATTR_BYTES, c.spawnattr);
    assertEquals(FILE_ACTIONS_BYTES, c.fileActions);
    assertEquals(SIGSET_BYTES, c.sigset);
    assertEquals({ ...SIGINFO }, c.siginfo);
    assertEquals({ ...RLIMIT }, c.rlimit);
    assertEquals({ ...STATX }, c.statx);
    assertEquals({ ...DIRENT64 }, c.dirent64);
    assertEquals({ ...O }, c.O);
    assertEquals({ ...SYS }, c.SYS);
    assertEquals({ ...MSGHDR }, c.msghdr);
    assertEquals({ ...IOVEC }, c.iovec);
    assertEquals({ ...CMSG }, c.cmsg);
    assertEquals({ ...UCRED }, c.ucred);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("aarch64's system call numbers and open flags are those of arm64's own headers", async () => {
  // Debian's linux-libc-dev-arm64-cross installs the arm64 kernel headers on any machine:
  // asm-generic/unistd.h holds arm64's system call numbers, asm/fcntl.h its open flags (it
  // keeps 32-bit ARM's O_DIRECTORY and O_NOFOLLOW, unlike x86_64, checked above).
  const include = "/usr/aarch64-linux-gnu/include";
  const calls = await Deno.readTextFile(`${include}/asm-generic/unistd.h`);
  const flags = await Deno.readTextFile(`${include}/asm/fcntl.h`);
  const number = (table: string, name: string) =>
    Number(defined(new RegExp(`#define ${name}\\s+(0?\\d+)`).exec(table)?.[1], name));
  const octal = (name: string) =>
    parseInt(defined(new RegExp(`#define ${name}\\s+(0\\d+)`).exec(flags)?.[1], name), 8);
  const arm = ARCH_CONSTANTS.aarch64;
  assertEquals(
    [arm.setgroups, arm.setresuid, arm.setresgid],
    [
      number(calls, "__NR_setgroups"),
      number(calls, "__NR_setresuid"),
      number(calls, "__NR_setresgid"),
    ],
  );
  assertEquals([arm.directory, arm.nofollow], [octal("O_DIRECTORY"), octal("O_NOFOLLOW")]);
});
