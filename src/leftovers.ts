/** Finding what the child left behind when denit is a subreaper rather than PID 1. */

/**
 * This process's children (zombies included), from /proc/self/task/TID/children: orphans
 * reparented to a subreaper are its children, and listing them costs nothing like a scan of
 * every process in /proc.
 */
export function ownChildren(): number[] {
  const found: number[] = [];
  let tasks: Iterable<Deno.DirEntry>;
  try {
    tasks = Deno.readDirSync("/proc/self/task");
  } catch {
    return found; // No /proc: the process group kill is all that can be done.
  }
  for (const task of tasks) {
    try {
      const text = Deno.readTextFileSync(`/proc/self/task/${task.name}/children`);
      for (const pid of text.split(" ")) if (pid.trim() !== "") found.push(Number(pid));
    } catch {
      // The thread ended while we looked: it had no children of its own to report.
    }
  }
  return found;
}
