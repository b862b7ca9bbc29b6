/** The POSIX path helpers copy mode needs (node:path would load Deno's Node layer at start). */

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

export { dirname } from "../common/paths.ts";
