/** The memory cgroup: its `oom_kill` count and limit (v2 or v1), found through /proc/self. */

import { pathExists } from "./process.ts";

/** Where the memory controller's files for this process are. */
export interface MemoryCgroup {
  readonly version: 1 | 2;
  readonly dir: string;
}

interface Mount {
  readonly root: string;
  readonly mountPoint: string;
  readonly fstype: string;
  readonly superOptions: readonly string[];
}

/** Parses /proc/PID/mountinfo (proc(5)): root is field 4, the mount point 5, after "-" the type. */
export function parseMountInfo(text: string): Mount[] {
  const mounts: Mount[] = [];
  for (const line of text.split("\n")) {
    const fields = line.split(" ");
    const dash = fields.indexOf("-");
    if (dash < 6) continue;
    mounts.push({
      root: unescape(fields[3] ?? ""),
      mountPoint: unescape(fields[4] ?? ""),
      fstype: fields[dash + 1] ?? "",
      superOptions: (fields[dash + 3] ?? "").split(","),
    });
  }
  return mounts;
}

/** mountinfo escapes space, tab, newline and backslash as octal (\040...). */
function unescape(field: string): string {
  return field.replace(
    /\\([0-7]{3})/g,
    (_, octal: string) => String.fromCharCode(parseInt(octal, 8)),
  );
}

/** The memory cgroup from /proc/self/cgroup and mountinfo: v1's `memory`, else v2; or null. */
export function memoryCgroupFrom(cgroupText: string, mountInfoText: string): MemoryCgroup | null {
  const mounts = parseMountInfo(mountInfoText);
  let unified: string | null = null;
  for (const line of cgroupText.split("\n")) {
    const [id, controllers = "", ...rest] = line.split(":");
    const path = rest.join(":"); // a path may hold ":"
    if (id === "0" && controllers === "") unified = path;
    if (!controllers.split(",").includes("memory")) continue;
    const mount = mounts.find((m) => m.fstype === "cgroup" && m.superOptions.includes("memory"));
    if (mount !== undefined) return { version: 1, dir: below(mount, path) };
  }
  if (unified === null) return null;
  const mount = mounts.find((m) => m.fstype === "cgroup2");
  return mount === undefined ? null : { version: 2, dir: below(mount, unified) };
}

/** The directory of cgroup `path` in a hierarchy mounted at `mount` (its root may be deeper). */
function below(mount: Mount, path: string): string {
  const root = mount.root === "/" ? "" : mount.root;
  const inside = path.startsWith(root) ? path.slice(root.length) : path;
  return `${mount.mountPoint}${inside === "/" ? "" : inside}`.replace(/\/+$/, "") || "/";
}

/** The `oom_kill N` count of memory.events (v2) or memory.oom_control (v1); null if absent. */
export function oomKillsFrom(text: string): number | null {
  const match = /^oom_kill (\d+)$/m.exec(text);
  return match === null ? null : Number(match[1]);
}

/** v1 reports "no limit" as a page-rounded LONG_MAX; anything this large means none. */
const NO_LIMIT_V1 = 2 ** 62;

/** The limit in bytes from memory.max (v2, "max" = none) or memory.limit_in_bytes (v1). */
export function memoryLimitFrom(version: 1 | 2, text: string): number | null {
  const value = text.trim();
  if (version === 2 && value === "max") return null;
  if (!/^\d+$/.test(value)) return null;
  const bytes = Number(value);
  return version === 1 && bytes >= NO_LIMIT_V1 ? null : bytes;
}

function read(path: string): string | null {
  if (!pathExists(path)) return null; // no exception to pay for (see sys/process.ts)
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return null; // No cgroup file system here, or not this controller: nothing to tell.
  }
}

export function findMemoryCgroup(): MemoryCgroup | null {
  const cgroup = read("/proc/self/cgroup");
  if (cgroup === null) return null;
  const mountInfo = read("/proc/self/mountinfo");
  return mountInfo === null ? null : memoryCgroupFrom(cgroup, mountInfo);
}

/** The file that holds the cgroup's `oom_kill` count. */
export function oomCountFile(cgroup: MemoryCgroup): string {
  return `${cgroup.dir}/${cgroup.version === 2 ? "memory.events" : "memory.oom_control"}`;
}

/** The cgroup's OOM-kill count so far, or null when it cannot be read. */
export function readOomKills(cgroup: MemoryCgroup): number | null {
  const text = read(oomCountFile(cgroup));
  return text === null ? null : oomKillsFrom(text);
}

/** The cgroup's memory limit in bytes, or null for none (or unreadable). */
export function readMemoryLimit(cgroup: MemoryCgroup): number | null {
  const file = cgroup.version === 2 ? "memory.max" : "memory.limit_in_bytes";
  const text = read(`${cgroup.dir}/${file}`);
  return text === null ? null : memoryLimitFrom(cgroup.version, text);
}

/** v2's `memory.oom.group` (an OOM kill takes the whole cgroup); null on v1 or unreadable. */
export function readOomGroup(cgroup: MemoryCgroup): boolean | null {
  if (cgroup.version !== 2) return null;
  const value = read(`${cgroup.dir}/memory.oom.group`)?.trim();
  return value === "1" ? true : value === "0" ? false : null;
}

/** "256 MiB", "1.5 GiB", "512 KiB": a limit as people write it. */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  const shown = Number.isInteger(value) ? String(value) : value.toFixed(1);
  return `${shown} ${units[unit]}`;
}
