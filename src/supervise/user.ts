/**
 * `--user USER[:GROUP]`: names from the container's /etc/passwd and /etc/group, or numbers.
 * Without GROUP: the primary group and those listing the user (initgroups(3)). HOME from
 * /etc/passwd as gosu sets it; an unknown number gets gid 0 and HOME=/, as Docker's --user.
 */

import { groups, passwd } from "../common/accounts.ts";

export interface RunAs {
  readonly uid: number;
  readonly gid: number;
  readonly groups: readonly number[];
  /** HOME from /etc/passwd; "/" when the user has no entry (as Docker). */
  readonly home: string;
  /** For /status: the spec as given. */
  readonly spec: string;
}

const MAX_ID = 0xfffffffe; // (uid_t) -1 means "unchanged" to the kernel

const CAP_SETGID = 6;
const CAP_SETUID = 7;

/** Throws RangeError unless this process may take other ids (root, or CAP_SETUID and SETGID). */
export function checkCanChangeUser(spec: string): void {
  const status = Deno.readTextFileSync("/proc/self/status");
  const effective = BigInt(`0x${/^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1] ?? "0"}`);
  const needed = (1n << BigInt(CAP_SETGID)) | (1n << BigInt(CAP_SETUID));
  if ((effective & needed) === needed) return;
  throw new RangeError(
    `Cannot run the child as "${spec}": denit runs as uid ${Deno.uid()}, and only root ` +
      `can change users (start denit as root, or drop --user)`,
  );
}

/** Resolves USER[:GROUP]; throws RangeError naming what does not exist. */
export function resolveUser(spec: string, root = ""): RunAs {
  const [user = "", group, extra] = spec.split(":");
  if (user === "" || extra !== undefined || group === "") {
    throw new RangeError(`Invalid user "${spec}": use USER, USER:GROUP, UID or UID:GID`);
  }
  const users = passwd(root);
  const numeric = /^\d+$/.test(user);
  const entry = numeric
    ? users.find((e) => e.uid === Number(user))
    : users.find((e) => e.name === user);
  if (!numeric && entry === undefined) {
    throw new RangeError(`Unknown user "${user}": not in /etc/passwd`);
  }
  const uid = entry?.uid ?? Number(user);
  if (uid > MAX_ID) throw new RangeError(`Invalid user "${spec}": ${user} is out of range`);
  const known = groups(root);
  let gid: number;
  let supplementary: number[];
  if (group !== undefined) {
    const found = /^\d+$/.test(group) ? Number(group) : known.find((g) => g.name === group)?.gid;
    if (found === undefined) throw new RangeError(`Unknown group "${group}": not in /etc/group`);
    if (found > MAX_ID) throw new RangeError(`Invalid group "${group}": out of range`);
    gid = found;
    supplementary = [gid];
  } else {
    gid = entry?.gid ?? 0;
    const name = entry?.name;
    supplementary = [
      gid,
      ...known.filter((g) => name !== undefined && g.members.includes(name)).map((g) => g.gid),
    ];
  }
  return {
    uid,
    gid,
    groups: [...new Set(supplementary)],
    // No entry: "/", as Docker gives a --user UID that its image's passwd does not list.
    home: entry?.home ?? "/",
    spec,
  };
}
