/** What the child left: as PID 1 every other process; as a subreaper, its descendants. */
import { orElse } from "../common/errors.ts";
import { type ProcessInfo, readProcStat } from "../common/proc.ts";

/** The children of `pid` (of this process: "self"), from every thread's children list. */
export function childrenOf(pid: number | "self"): number[] {
  // Gone, or no /proc: nothing below it. A thread that ended while we looked: no children.
  const tasks = orElse(() => [...Deno.readDirSync(`/proc/${pid}/task`)], []);
  return tasks.flatMap((task) =>
    orElse(() => Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`), "")
      .split(" ").filter((word) => word.trim() !== "").map(Number)
  );
}

/** Every descendant of `root` (this process unless given), children first, each once. */
export function descendants(root: number | "self" = "self"): number[] {
  const seen = new Set<number>();
  const queue = childrenOf(root);
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    if (seen.has(pid)) continue;
    seen.add(pid);
    queue.push(...childrenOf(pid));
  }
  return [...seen];
}

/** Every process in this PID namespace but this one (as PID 1: everything kill(-1) reaches). */
export function otherProcesses(): number[] {
  const entries = orElse(() => [...Deno.readDirSync("/proc")], []); // no /proc: nothing to name
  return entries.filter((entry) => /^\d+$/.test(entry.name)).map((entry) => Number(entry.name))
    .filter((pid) => pid !== Deno.pid);
}

/** What `self` may have to stop or name: as PID 1 every other process, else its descendants. */
export function leftovers(self: number = Deno.pid): number[] {
  return self === 1 ? otherProcesses() : descendants(self);
}

const PF_EXITING = 0x4; // linux/sched.h
const SIGKILL_BIT = 1n << 8n; // signal 9 in a /proc mask

/** True once a process is on its way out: SIGKILL pending, exiting, a zombie, or gone. */
export function isEnding(pid: number): boolean {
  try {
    const stat = readProcStat(pid);
    if ("ZXx".includes(stat.field(3) || "Z") || (Number(stat.field(9)) & PF_EXITING) !== 0) {
      return true;
    }
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    const pending = [...status.matchAll(/^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$/gm)];
    return pending.some((match) => (BigInt(`0x${match[1]}`) & SIGKILL_BIT) !== 0n);
  } catch {
    return true;
  }
}

/** "12 (sleep), 13 (sh, D)": at most `limit` processes, then how many more. */
export function formatProcesses(processes: readonly ProcessInfo[], limit = 8): string {
  const shown = processes.slice(0, limit).map((p) =>
    p.state === "S" || p.state === "R" || p.state === "?"
      ? `${p.pid} (${p.name})`
      : `${p.pid} (${p.name}, ${p.state})`
  );
  const more = processes.length - shown.length;
  return shown.join(", ") + (more > 0 ? ` and ${more} more` : "");
}
