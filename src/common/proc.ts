/** A process's /proc/PID/stat, the one reader of it. */

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
