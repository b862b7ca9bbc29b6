/** The container's account databases, read as files (no NSS), and USER[:GROUP] in them. */

import { orElse } from "./errors.ts";

function lines(file: string): string[][] {
  // No such database (distroless images may lack /etc/group): numbers only.
  const text = orElse(() => Deno.readTextFileSync(file), "");
  return text.split("\n").filter((line) => line !== "" && !line.startsWith("#")).map((line) =>
    line.split(":")
  );
}

/** The entries of ROOT/etc/passwd with numeric ids; none if it cannot be read. */
function passwd(root: string) {
  return lines(`${root}/etc/passwd`).flatMap(([name = "", , uid = "", gid = "", , home = ""]) =>
    /^\d+$/.test(uid) && /^\d+$/.test(gid)
      ? [{ name, uid: Number(uid), gid: Number(gid), home }]
      : []
  );
}

/** The entries of ROOT/etc/group with a numeric id; none if it cannot be read. */
function groups(root: string) {
  return lines(`${root}/etc/group`).flatMap(([name = "", , gid = "", members = ""]) =>
    /^\d+$/.test(gid)
      ? [{ name, gid: Number(gid), members: members.split(",").filter((m) => m !== "") }]
      : []
  );
}

/** Who a child runs as (`--user`). */
export interface RunAs {
  readonly uid: number;
  readonly gid: number;
  readonly groups: readonly number[];
  /** HOME from /etc/passwd; "/" when the user has no entry (as Docker). */
  readonly home: string;
  readonly spec: string;
}

const MAX_ID = 0xfffffffe; // (uid_t) -1 means "unchanged" to the kernel

const SET_IDS = (1n << 6n) | (1n << 7n); // CAP_SETGID, CAP_SETUID (linux/capability.h)

/** Throws RangeError unless this process may take other ids (root, or CAP_SETUID and SETGID). */
export function checkCanChangeUser(spec: string): void {
  const status = Deno.readTextFileSync("/proc/self/status");
  const effective = BigInt(`0x${/^CapEff:\s*([0-9a-f]+)$/m.exec(status)?.[1] ?? "0"}`);
  if ((effective & SET_IDS) === SET_IDS) return;
  throw new RangeError(
    `Cannot run the child as "${spec}": denit runs as uid ${Deno.uid()}, and only root ` +
      `can change users (start denit as root, or drop --user)`,
  );
}

/**
 * Resolves USER[:GROUP] (`--user`, `--chown`) as gosu and Docker do (initgroups(3), HOME; an
 * unknown number: gid 0, HOME=/); throws RangeError naming what does not exist.
 */
export function resolveUser(spec: string, root = ""): RunAs {
  const [user = "", group, extra] = spec.split(":");
  if (user === "" || extra !== undefined || group === "") {
    throw new RangeError(`Invalid user "${spec}": use USER, USER:GROUP, UID or UID:GID`);
  }
  const users = passwd(root);
  const numeric = /^\d+$/.test(user);
  const entry = users.find((e) => numeric ? e.uid === Number(user) : e.name === user);
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
    const member = known.filter((g) => entry !== undefined && g.members.includes(entry.name));
    supplementary = [gid, ...member.map((g) => g.gid)];
  }
  // No entry: HOME=/, as Docker gives a --user UID that its image's passwd does not list.
  return { uid, gid, groups: [...new Set(supplementary)], home: entry?.home ?? "/", spec };
}
