/**
 * Dropping privileges on one thread: raw system calls (glibc's wrappers change every thread)
 * on a worker that spawns the child; the supervisor's thread stays root.
 */

import { SYS } from "./layout.ts";
import { addressOf, errno, errnoMessage, libc } from "./symbols.ts";

/** setgroups, setresgid, setresuid for this thread only: null once done, else what failed. */
export function dropThreadPrivileges(
  uid: number,
  gid: number,
  groups: readonly number[],
): string | null {
  // gid_t list[], over V8's 64-byte on-heap limit: a collection in between cannot move it.
  const list = new Uint32Array(Math.max(groups.length, 32));
  list.set(groups);
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
