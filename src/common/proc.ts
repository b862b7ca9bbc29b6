/** A process's /proc/PID/stat, the one reader of it, and what denit reads there. */

/** The command's name, and field N by its number in proc(5) (1: pid, 3: state, 4: ppid, ...). */
export interface ProcStat {
  readonly name: string;
  field(n: number): string;
}

/** Reads /proc/PID/stat; throws where the process cannot be read (gone, no /proc). */
export function readProcStat(pid: number | "self"): ProcStat {
  const text = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const close = text.lastIndexOf(")");
  const after = text.slice(close + 2).split(" ");
  return { name: text.slice(text.indexOf("(") + 1, close), field: (n) => after[n - 3] ?? "" };
}

/** A process found in /proc. */
export interface ProcessInfo {
  readonly pid: number;
  /** The command name (/proc/PID/comm), "?" if it ended while we looked. */
  readonly name: string;
  readonly state: string;
  readonly pgid: number;
  readonly sid: number;
  readonly ppid: number;
  /** When it started (proc(5) field 22): with the pid, its identity; "" when unknown. */
  readonly startTime: string;
}

/** Name and state of a process, from /proc/PID/stat. */
export function describeProcess(pid: number): ProcessInfo {
  try {
    const stat = readProcStat(pid);
    return {
      pid,
      name: stat.name,
      state: stat.field(3) || "?",
      pgid: Number(stat.field(5)),
      sid: Number(stat.field(6)),
      ppid: Number(stat.field(4)),
      startTime: stat.field(22),
    };
  } catch {
    // Ended while we looked.
    return { pid, name: "?", state: "?", pgid: 0, sid: 0, ppid: 0, startTime: "" };
  }
}
