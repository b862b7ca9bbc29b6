/** Path arithmetic on strings (node:path would load Deno's Node layer at start). */

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

/** Collapses "//", "/./" and "/x/../"; keeps a leading "/". */
export function normalize(path: string): string {
  const absolute = path.startsWith("/");
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") {
      if (parts.length > 0 && parts[parts.length - 1] !== "..") parts.pop();
      else if (!absolute) parts.push("..");
      continue;
    }
    parts.push(part);
  }
  const joined = parts.join("/");
  return absolute ? `/${joined}` : joined === "" ? "." : joined;
}

export function join(...parts: string[]): string {
  return normalize(parts.filter((part) => part !== "").join("/"));
}

/** An absolute, normalised path, relative ones taken from the working directory. */
export function resolve(...parts: string[]): string {
  let path = Deno.cwd();
  for (const part of parts) path = part.startsWith("/") ? part : `${path}/${part}`;
  return normalize(path);
}

/** The last component ("" for "/"). */
export function basename(path: string): string {
  const trimmed = path.replace(/\/+$/, "");
  return trimmed.slice(trimmed.lastIndexOf("/") + 1);
}

/** `bytes` random bytes in hex, for a name no other run chooses (temporary files, sockets). */
export function randomHex(bytes: number): string {
  const random = crypto.getRandomValues(new Uint8Array(bytes));
  return [...random].map((b) => b.toString(16).padStart(2, "0")).join("");
}
