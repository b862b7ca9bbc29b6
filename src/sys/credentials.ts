/**
 * Dropping privileges on one thread only: Linux keeps credentials per thread, and the raw system
 * calls (not glibc's wrappers, which make every thread follow) change only the caller. A worker
 * thread drops them and spawns the child, which inherits them; the supervisor's thread stays
 * root. A fork of a multi-threaded V8 process is no alternative.
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
