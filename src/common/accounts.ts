/** The container's own account databases, read as files (no NSS, no shell). */

export interface PasswdEntry {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
  readonly home: string;
}

export interface GroupEntry {
  readonly name: string;
  readonly gid: number;
  readonly members: readonly string[];
}

function lines(file: string): string[][] {
  let text: string;
  try {
    text = Deno.readTextFileSync(file);
  } catch {
    return []; // No such database (distroless images may lack /etc/group): numbers only.
  }
  return text.split("\n").filter((line) => line !== "" && !line.startsWith("#")).map((line) =>
    line.split(":")
  );
}

/** The entries of ROOT/etc/passwd with numeric ids; none if it cannot be read. */
export function passwd(root = ""): PasswdEntry[] {
  return lines(`${root}/etc/passwd`).flatMap(([name = "", , uid = "", gid = "", , home = ""]) =>
    /^\d+$/.test(uid) && /^\d+$/.test(gid)
      ? [{ name, uid: Number(uid), gid: Number(gid), home }]
      : []
  );
}

/** The entries of ROOT/etc/group with a numeric id; none if it cannot be read. */
export function groups(root = ""): GroupEntry[] {
  return lines(`${root}/etc/group`).flatMap(([name = "", , gid = "", members = ""]) =>
    /^\d+$/.test(gid)
      ? [{ name, gid: Number(gid), members: members.split(",").filter((m) => m !== "") }]
      : []
  );
}
