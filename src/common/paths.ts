/** Path arithmetic on strings, shared by copy mode, the supervisor and the job service. */

/** Everything but the last component ("/" for "/x", "." for "x"). */
export function dirname(path: string): string {
  const trimmed = path.replace(/\/+$/, "");
  if (trimmed === "" && path.startsWith("/")) return "/";
  const slash = trimmed.lastIndexOf("/");
  if (slash < 0) return ".";
  return slash === 0 ? "/" : trimmed.slice(0, slash);
}

/** denit's launcher: `denit` beside the runtime that runs this code (dist/, the image, a copy). */
export function launcherPath(): string {
  return `${dirname(Deno.execPath())}/denit`;
}
