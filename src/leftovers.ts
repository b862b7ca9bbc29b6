/** Finding what the child left behind when denit is a subreaper rather than PID 1. */

/** The pids whose parent is `parent`, read from /proc/PID/stat. */
export function childrenOf(parent: number): number[] {
  const found: number[] = [];
  let entries: Iterable<Deno.DirEntry>;
  try {
    entries = Deno.readDirSync("/proc");
  } catch {
    return found; // No /proc: the process group kill is all that can be done.
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry.name)) continue;
    const ppid = parentOf(entry.name);
    if (ppid === parent) found.push(Number(entry.name));
  }
  return found;
}

function parentOf(pid: string): number | null {
  let stat: string;
  try {
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return null; // The process ended while we looked: nothing left to signal.
  }
  // proc(5): "pid (comm) state ppid ..."; comm may hold spaces and parentheses.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[1]);
}
