/**
 * Dropping privileges on one thread only. Linux keeps credentials per thread; glibc's
 * setuid/setgid/setgroups wrappers make every thread of the process follow (they signal each
 * thread, SIGSETXID), but the raw system calls change only the thread that makes them. denit
 * runs the child as another user by making these calls on a worker thread of its own and
 * spawning the child from that thread: the child inherits the thread's credentials, while the
 * supervisor's thread stays root (to reap and signal everything). Forking denit instead is not
 * possible: only the calling thread survives a fork of a multi-threaded V8 process.
 */

import { SYS } from "./layout.ts";
import { addressOf, errno, errnoMessage, libc } from "./symbols.ts";

/**
 * setgroups, setresgid, setresuid (real, effective and saved ids: no way back to root) for the
 * calling thread only, in that order (groups and gid while still root): null once done, else
 * which call failed and why.
 */
export function dropThreadPrivileges(
  uid: number,
  gid: number,
  groups: readonly number[],
): string | null {
  const list = new Uint32Array(groups); // gid_t list[]
  const pointer = addressOf(list);
  const steps: Array<[string, bigint, bigint, bigint, bigint]> = [
    ["setgroups", BigInt(SYS.setgroups), BigInt(groups.length), pointer, 0n],
    ["setresgid", BigInt(SYS.setresgid), BigInt(gid), BigInt(gid), BigInt(gid)],
    ["setresuid", BigInt(SYS.setresuid), BigInt(uid), BigInt(uid), BigInt(uid)],
  ];
  for (const [name, ...args] of steps) {
    if (libc.syscall(...args) !== 0n) return `${name} failed: ${errnoMessage(errno())}`;
  }
  void list; // referenced until the calls are done
  return null;
}
