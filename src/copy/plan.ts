/**
 * Copy mode, first half: walk the sources and decide, before anything is written, what each
 * destination path becomes. Every refusal (a symlink in the way, DEST inside SRC, a special
 * file under --strict) happens here, so a refused copy writes nothing at all.
 */

import { basename, dirname, join, resolve } from "./paths.ts";
import { errnoMessage, type PathStat, statPath } from "../sys/files.ts";

/** A copy failure; the message is one line naming the path and the cause. */
export class CopyError extends Error {
  override name = "CopyError";
}

/** Ownership to give every copied entry (`--chown`). */
export interface Owner {
  readonly uid: number;
  readonly gid: number;
}

/** One thing to copy: a source path and the destination path it becomes. */
export interface Root {
  readonly src: string;
  /** The destination path; for a "contents" root (`SRC/.`), the directory receiving them. */
  readonly dest: string;
  readonly contents: boolean;
}

/** What happens to an existing destination. */
export type Fate = "new" | "replace" | "unchanged";

/** One planned entry. */
export type Item =
  | {
    readonly kind: "dir";
    readonly src: string;
    readonly dest: string;
    readonly stat: PathStat;
    readonly fate: Fate;
  }
  | {
    readonly kind: "file";
    readonly src: string;
    readonly dest: string;
    /** null for a new file in a new directory: read from the open file when copying it. */
    readonly stat: PathStat | null;
    readonly fate: Fate;
  }
  | {
    readonly kind: "link";
    readonly src: string;
    readonly dest: string;
    readonly stat: PathStat;
    readonly target: string;
    readonly fate: Fate;
  }
  | { readonly kind: "special"; readonly src: string; readonly stat: PathStat };

/** What the plan needs to know of the options. */
export interface PlanOptions {
  readonly owner: Owner | null;
  readonly fileMode: number | null;
  readonly strict: boolean;
}

/** The cause part of a Deno error message, without the "(os error N)" tail. */
export function describeError(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return (message.split(" (os error")[0] ?? "").split("\n")[0] ?? "";
}

function stat(path: string): PathStat | null {
  const result = statPath(path);
  if (result.ok) return result.value;
  // ENOENT: nothing there, which the callers treat as "to be created".
  if (result.errno === 2) return null;
  throw new CopyError(`Cannot inspect "${path}": ${errnoMessage(result.errno)}`);
}

function sameTime(a: PathStat, b: PathStat): boolean {
  return a.mtime.sec === b.mtime.sec && a.mtime.nsec === b.mtime.nsec;
}

function ownerMatches(existing: PathStat, owner: Owner | null): boolean {
  return owner === null || (existing.uid === owner.uid && existing.gid === owner.gid);
}

/** Splits "SRC/." (copy the contents) from "SRC" (copy SRC itself) and resolves the roots. */
export function rootsFor(sources: readonly string[], dest: string): Root[] {
  return sources.map((source) => {
    const contents = source === "." || source.endsWith("/.");
    const src = resolve(contents ? source.slice(0, -1) || "." : source);
    return { src, dest: contents ? resolve(dest) : join(resolve(dest), basename(src)), contents };
  });
}

function realPathOf(path: string): string {
  // The nearest existing ancestor, resolved, plus the part that does not exist yet.
  let head = resolve(path);
  const tail: string[] = [];
  for (;;) {
    try {
      return join(Deno.realPathSync(head), ...tail.reverse());
    } catch {
      if (head === "/") return join("/", ...tail.reverse());
      tail.push(basename(head));
      head = resolve(head, "..");
    }
  }
}

function checkNotInside(root: Root, srcStat: PathStat): void {
  if (srcStat.kind !== "dir") return;
  const src = realPathOf(root.src);
  const dest = realPathOf(root.contents ? root.dest : resolve(root.dest, ".."));
  if (dest === src) {
    throw new CopyError(
      `Cannot copy "${root.src}" into itself: SRC and DEST are the same directory`,
    );
  }
  if (dest.startsWith(`${src}/`)) {
    throw new CopyError(`Cannot copy "${root.src}" into "${dest}": DEST is inside SRC`);
  }
}

function fateOf(item: { kind: "file" | "link" | "dir"; dest: string }, existing: PathStat | null) {
  if (existing === null) return "new" as const;
  if (item.kind === "dir") {
    if (existing.kind === "dir") return "replace" as const;
    if (existing.kind === "link") {
      throw new CopyError(`Refusing to write through the symlink "${item.dest}"`);
    }
    throw new CopyError(`Cannot put a directory at "${item.dest}": a ${existing.kind} is there`);
  }
  if (existing.kind === "dir") {
    throw new CopyError(`Cannot put a ${item.kind} at "${item.dest}": a directory is there`);
  }
  return "replace" as const;
}

/** Walks every root and returns the plan; throws CopyError on the first refusal. */
export function planCopy(roots: readonly Root[], options: PlanOptions): Item[] {
  const items: Item[] = [];
  // `fresh`: dest's parent does not exist yet, so dest cannot exist either (no lookup needed).
  const visit = (src: string, dest: string, srcStat: PathStat, fresh: boolean): void => {
    if (srcStat.kind === "dir") {
      const existing = fresh ? null : stat(dest);
      const fate = fateOf({ kind: "dir", dest }, existing);
      const same = existing !== null && existing.mode === srcStat.mode &&
        sameTime(existing, srcStat) &&
        ownerMatches(existing, options.owner);
      items.push({ kind: "dir", src, dest, stat: srcStat, fate: same ? "unchanged" : fate });
      let entries: Deno.DirEntry[];
      try {
        entries = [...Deno.readDirSync(src)].sort((a, b) =>
          a.name < b.name ? -1 : a.name > b.name ? 1 : 0
        );
      } catch (err: unknown) {
        throw new CopyError(`Cannot read "${src}": ${describeError(err)}`);
      }
      for (const entry of entries) {
        // Plain concatenation: both sides are normalised already, and join() is a hot spot here.
        const child = `${src}/${entry.name}`;
        const childDest = `${dest}/${entry.name}`;
        if (existing === null && entry.isFile) {
          // Nothing to compare against: the copy reads size, mode and times from the open file.
          items.push({ kind: "file", src: child, dest: childDest, stat: null, fate: "new" });
          continue;
        }
        const childStat = stat(child);
        // Gone between listing and looking: nothing to copy, nothing lost.
        if (childStat !== null) visit(child, childDest, childStat, existing === null);
      }
      return;
    }
    if (srcStat.kind === "file" || srcStat.kind === "link") {
      const existing = fresh ? null : stat(dest);
      const fate = fateOf({ kind: srcStat.kind, dest }, existing);
      if (srcStat.kind === "link") {
        const target = Deno.readLinkSync(src);
        const same = existing?.kind === "link" && Deno.readLinkSync(dest) === target &&
          ownerMatches(existing, options.owner);
        items.push({
          kind: "link",
          src,
          dest,
          stat: srcStat,
          target,
          fate: same ? "unchanged" : fate,
        });
        return;
      }
      const mode = options.fileMode ?? srcStat.mode;
      const same = existing?.kind === "file" && existing.size === srcStat.size &&
        existing.mode === mode && sameTime(existing, srcStat) &&
        ownerMatches(existing, options.owner);
      items.push({ kind: "file", src, dest, stat: srcStat, fate: same ? "unchanged" : fate });
      return;
    }
    if (options.strict) {
      throw new CopyError(`Refusing to copy "${src}": it is a ${srcStat.kind} (--strict)`);
    }
    items.push({ kind: "special", src, stat: srcStat });
  };
  for (const root of roots) {
    // SRC/. follows SRC if it is a symlink to a directory, as the shell's SRC/* did.
    const srcStat = root.contents ? followedStat(root.src) : stat(root.src);
    if (srcStat === null) {
      throw new CopyError(`Cannot copy "${root.src}": no such file or directory`);
    }
    if (root.contents && srcStat.kind !== "dir") {
      throw new CopyError(`Cannot copy the contents of "${root.src}": not a directory`);
    }
    checkNotInside(root, srcStat);
    // DEST as given may be a symlink (a mounted volume's path): resolved once, here. Everything
    // below it is checked strictly. SRC/. makes DEST a copy of SRC's directory, as cp -a does.
    const dest = root.contents
      ? realPathOf(root.dest)
      : join(realPathOf(dirname(root.dest)), basename(root.dest));
    visit(root.src, dest, srcStat, false);
  }
  return items;
}

function followedStat(path: string): PathStat | null {
  return stat(`${path.replace(/\/+$/, "")}/.`);
}
