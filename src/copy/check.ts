/**
 * Copy mode, first pass: walk the sources (and DEST where it exists) and decide, before
 * anything is written, whether the copy may go ahead. Every refusal (a symlink in DEST where
 * SRC has a directory, a directory in the way of a file, a special file under --strict) happens
 * here, so a refused copy writes nothing at all. The walk holds one directory listing per level
 * and no list of the tree: memory grows with depth and the largest directory, not the tree.
 */

import {
  AT_FDCWD,
  closeFd,
  type DirEntry,
  Errno,
  errnoMessage,
  type FileKind,
  listDirectory,
  openDirectory,
  type PathStat,
  readSymlink,
  statAt,
  statFd,
  statPath,
} from "../sys/files.ts";
import { bytesOf, compareNames, display, printable, sameBytes } from "./names.ts";

/** A copy failure; the message is one line naming the path and the cause. */
export class CopyError extends Error {
  override name = "CopyError";
}

/** Ownership to give every copied entry (`--chown`). */
export interface Owner {
  readonly uid: number;
  readonly gid: number;
}

/** One SRC of the command line. */
export interface Root {
  /** The path as given (messages), and as opened. */
  readonly src: string;
  /** `SRC/.`: the entries of SRC go into DEST itself, which becomes a copy of SRC's directory. */
  readonly contents: boolean;
  /** `SRC/` (a trailing slash): a symlink at SRC is followed, as by `cp -a SRC/`. */
  readonly follow: boolean;
  /** The name in DEST (basename of SRC unless `denit init` names it). */
  readonly destName: string;
}

/** What the plan needs to know of the options. */
export interface PlanOptions {
  readonly owner: Owner | null;
  readonly fileMode: number | null;
  readonly strict: boolean;
}

/** What happens to an entry whose destination may exist. */
export type Fate = "new" | "replace" | "unchanged";

/** One line of the plan, for --dry-run and -v. */
export interface PlanItem {
  readonly action: "mkdir" | "update" | "unchanged" | "copy" | "replace" | "link" | "skip";
  readonly src: string;
  readonly dest: string;
  readonly detail: string;
}

/** Throws the one-line CopyError for a failed call. */
export function fail(action: string, path: string, errno: number): never {
  throw new CopyError(`Cannot ${action} "${path}": ${errnoMessage(errno)}`);
}

function sameTime(a: PathStat, b: PathStat): boolean {
  return a.mtime.sec === b.mtime.sec && a.mtime.nsec === b.mtime.nsec;
}

function ownerMatches(existing: PathStat, owner: Owner | null): boolean {
  return owner === null || (existing.uid === owner.uid && existing.gid === owner.gid);
}

/** Whether a file must be written: its destination missing, different, or already the same. */
export function fileFate(src: PathStat, dest: PathStat | null, options: PlanOptions): Fate {
  if (dest === null) return "new";
  const mode = options.fileMode ?? src.mode;
  const same = dest.kind === "file" && dest.size === src.size && dest.mode === mode &&
    sameTime(dest, src) && ownerMatches(dest, options.owner);
  return same ? "unchanged" : "replace";
}

/** Whether a directory's own mode, times or owner must be set. */
export function dirFate(src: PathStat, dest: PathStat | null, options: PlanOptions): Fate {
  if (dest === null) return "new";
  const same = dest.mode === src.mode && sameTime(dest, src) && ownerMatches(dest, options.owner);
  return same ? "unchanged" : "replace";
}

/** Whether a symlink must be written: its destination missing, or another target/owner. */
export function linkFate(
  target: Uint8Array,
  dest: PathStat | null,
  destTarget: () => Uint8Array | null,
  options: PlanOptions,
): Fate {
  if (dest === null) return "new";
  if (dest.kind !== "link" || !ownerMatches(dest, options.owner)) return "replace";
  const existing = destTarget();
  return existing !== null && sameBytes(existing, target) ? "unchanged" : "replace";
}

/** statAt that reads ENOENT as "nothing there"; any other failure is a CopyError. */
export function statIfThere(dirFd: number, name: Uint8Array, path: string): PathStat | null {
  const result = statAt(dirFd, name);
  if (result.ok) return result.value;
  if (result.errno === Errno.ENOENT) return null; // to be created
  fail("inspect", path, result.errno);
}

/** Refusals of a destination that exists where SRC has `kind`. */
export function checkDestination(kind: FileKind, dest: PathStat | null, path: string): void {
  if (dest === null) return;
  if (kind === "dir") {
    if (dest.kind === "dir") return;
    if (dest.kind === "link") {
      throw new CopyError(`Refusing to write through the symlink "${path}"`);
    }
    throw new CopyError(`Cannot put a directory at "${path}": a ${dest.kind} is there`);
  }
  if (dest.kind === "dir") {
    throw new CopyError(
      `Cannot put a ${kind === "link" ? "link" : "file"} at "${path}": a directory is there`,
    );
  }
}

/** Entries of an open directory, sorted by name bytes (a stable order for plans and tests). */
export function sortedEntries(fd: number, path: string): DirEntry[] {
  const listed = listDirectory(fd);
  if (!listed.ok) fail("read", path, listed.errno);
  return listed.value.sort((a, b) => compareNames(a.name, b.name));
}

/** The kind of an entry: from getdents when the filesystem says, else from statx. */
export function kindOf(entry: DirEntry, dirFd: number, path: string): FileKind | null {
  if (entry.kind !== null) return entry.kind;
  return statIfThere(dirFd, entry.name, path)?.kind ?? null;
}

/** Opens a directory below dirFd without following a symlink; a CopyError if it cannot. */
export function openDir(dirFd: number, name: Uint8Array, path: string): number {
  const opened = openDirectory(dirFd, name);
  if (!opened.ok) fail("read", path, opened.errno);
  return opened.value;
}

interface Frame {
  readonly srcFd: number;
  /** The existing destination directory; null when it will be new (nothing to compare). */
  readonly destFd: number | null;
  readonly srcPath: string;
  readonly destPath: string;
  readonly entries: DirEntry[];
  index: number;
}

/** The source of a root, opened: a directory to walk, or one entry of its parent. */
export type OpenedRoot =
  | { readonly kind: "dir"; readonly fd: number; readonly stat: PathStat }
  | {
    readonly kind: "entry";
    readonly parentFd: number;
    readonly name: Uint8Array;
    readonly stat: PathStat;
  };

/** Opens SRC as the root says; a CopyError if it is missing or not what it must be. */
export function openRoot(root: Root): OpenedRoot {
  if (!root.contents && root.destName === "") {
    throw new CopyError(
      `Cannot copy "${root.src}" under a name: use "${
        root.src.replace(/\/+$/, "")
      }/." to copy its contents`,
    );
  }
  const follow = root.contents || root.follow;
  const stat = statPath(root.src, follow);
  if (!stat.ok) {
    if (stat.errno === Errno.ENOENT) {
      throw new CopyError(
        `Cannot copy "${root.src}": no such file or directory${globHint(root.src)}`,
      );
    }
    fail("inspect", root.src, stat.errno);
  }
  if (root.contents && stat.value.kind !== "dir") {
    throw new CopyError(`Cannot copy the contents of "${root.src}": not a directory`);
  }
  if (stat.value.kind === "dir") {
    const fd = openDirectory(AT_FDCWD, root.src, follow);
    if (!fd.ok) fail("read", root.src, fd.errno);
    return { kind: "dir", fd: fd.value, stat: stat.value };
  }
  const slash = root.src.replace(/\/+$/, "").lastIndexOf("/");
  const parent = slash < 0 ? "." : slash === 0 ? "/" : root.src.slice(0, slash);
  const parentFd = openDirectory(AT_FDCWD, parent, true);
  if (!parentFd.ok) fail("read", parent, parentFd.errno);
  return {
    kind: "entry",
    parentFd: parentFd.value,
    name: bytesOf(root.src.slice(slash + 1).replace(/\/+$/, "")),
    stat: stat.value,
  };
}

/** Closes what openRoot opened. */
export function closeRoot(opened: OpenedRoot): void {
  closeFd(opened.kind === "dir" ? opened.fd : opened.parentFd);
}

/**
 * The first pass over one root: throws CopyError on the first refusal; reports every entry
 * through `onItem` (the plan).
 */
export function checkRoot(
  root: Root,
  opened: OpenedRoot,
  destRootFd: number,
  destRootPath: string,
  options: PlanOptions,
  onItem: (item: PlanItem) => void,
): void {
  if (opened.kind === "entry") {
    const destName = bytesOf(root.destName);
    const destPath = root.contents ? destRootPath : `${destRootPath}/${root.destName}`;
    // destRootFd < 0: DEST does not exist (a dry run does not make it): nothing to compare.
    const dest = destRootFd < 0 ? null : statIfThere(destRootFd, destName, destPath);
    checkDestination(opened.stat.kind, dest, destPath);
    entryItem(
      opened.parentFd,
      opened.name,
      opened.stat,
      root.src,
      destRootFd,
      destName,
      dest,
      destPath,
      options,
      onItem,
    );
    return;
  }
  const stack = [rootFrame(root, opened, destRootFd, destRootPath, options, onItem)];
  try {
    while (stack.length > 0) {
      const frame = stack.at(-1);
      if (frame === undefined) break;
      const entry = frame.entries[frame.index++];
      if (entry === undefined) {
        stack.pop();
        if (stack.length > 0 || frame.srcFd !== opened.fd) closeFd(frame.srcFd);
        if (frame.destFd !== null && frame.destFd !== destRootFd) closeFd(frame.destFd);
        continue;
      }
      const child = checkEntry(frame, entry, options, onItem);
      if (child !== null) stack.push(child);
    }
  } finally {
    for (const frame of stack) {
      if (frame.srcFd !== opened.fd) closeFd(frame.srcFd);
      if (frame.destFd !== null && frame.destFd !== destRootFd) closeFd(frame.destFd);
    }
  }
}

/** The walk's first frame: a root that is a directory, checked and planned as one. */
function rootFrame(
  root: Root,
  opened: Extract<OpenedRoot, { kind: "dir" }>,
  destRootFd: number,
  destRootPath: string,
  options: PlanOptions,
  onItem: (item: PlanItem) => void,
): Frame {
  const destName = bytesOf(root.destName);
  const destPath = root.contents ? destRootPath : `${destRootPath}/${root.destName}`;
  let destFd: number | null = destRootFd;
  if (!root.contents) {
    // destRootFd < 0: DEST does not exist (a dry run does not make it): nothing to compare.
    const dest = destRootFd < 0 ? null : statIfThere(destRootFd, destName, destPath);
    checkDestination("dir", dest, destPath);
    onItem(dirItem(opened.stat, dest, root.src, destPath, options));
    destFd = dest === null ? null : openDir(destRootFd, destName, destPath);
  } else {
    const dest = statPath(destRootPath, true);
    onItem(dirItem(opened.stat, dest.ok ? dest.value : null, root.src, destPath, options));
    if (destRootFd < 0) destFd = null;
  }
  const srcPath = root.src.replace(/\/\.?$/, "") || "/";
  const entries = sortedEntries(opened.fd, root.src);
  return { srcFd: opened.fd, destFd, srcPath, destPath, entries, index: 0 };
}

/**
 * One entry of a directory being walked: refused (CopyError), planned (null), or a directory to
 * walk next (its frame).
 */
function checkEntry(
  frame: Frame,
  entry: DirEntry,
  options: PlanOptions,
  onItem: (item: PlanItem) => void,
): Frame | null {
  const srcPath = display(frame.srcPath, entry.name);
  const path = display(frame.destPath, entry.name);
  const kind = kindOf(entry, frame.srcFd, srcPath);
  if (kind === null) return null; // gone between listing and looking: nothing to copy
  const dest = frame.destFd === null ? null : statIfThere(frame.destFd, entry.name, path);
  if (kind === "dir") {
    checkDestination("dir", dest, path);
    const srcStat = statIfThere(frame.srcFd, entry.name, srcPath);
    if (srcStat === null) return null;
    onItem(dirItem(srcStat, dest, srcPath, path, options));
    const srcFd = openDir(frame.srcFd, entry.name, srcPath);
    const destFd = dest === null || frame.destFd === null
      ? null
      : openDir(frame.destFd, entry.name, path);
    const entries = sortedEntries(srcFd, srcPath);
    return { srcFd, destFd, srcPath, destPath: path, entries, index: 0 };
  }
  const srcStat = kind === "file" && dest === null
    ? null
    : statIfThere(frame.srcFd, entry.name, srcPath);
  if (kind !== "file" && srcStat === null) return null;
  if (kind !== "file" && kind !== "link") {
    special(kind, srcPath, options, onItem);
    return null;
  }
  checkDestination(kind, dest, path);
  if (srcStat === null) {
    onItem({ action: "copy", src: srcPath, dest: path, detail: "" });
    return null;
  }
  entryItem(
    frame.srcFd,
    entry.name,
    srcStat,
    srcPath,
    frame.destFd ?? -1,
    entry.name,
    dest,
    path,
    options,
    onItem,
  );
  return null;
}

function special(
  kind: FileKind,
  srcPath: string,
  options: PlanOptions,
  onItem: (item: PlanItem) => void,
) {
  if (options.strict) {
    throw new CopyError(`Refusing to copy "${srcPath}": it is a ${kind} (--strict)`);
  }
  onItem({ action: "skip", src: srcPath, dest: "", detail: kind });
}

function dirItem(
  src: PathStat,
  dest: PathStat | null,
  srcPath: string,
  path: string,
  options: PlanOptions,
): PlanItem {
  const fate = dirFate(src, dest, options);
  const action = fate === "new" ? "mkdir" : fate === "unchanged" ? "unchanged" : "update";
  return { action, src: srcPath, dest: path, detail: "" };
}

function entryItem(
  srcDirFd: number,
  name: Uint8Array,
  src: PathStat,
  srcPath: string,
  destDirFd: number,
  destName: Uint8Array,
  dest: PathStat | null,
  path: string,
  options: PlanOptions,
  onItem: (item: PlanItem) => void,
): void {
  if (src.kind === "link") {
    const target = readSymlink(srcDirFd, name);
    if (!target.ok) fail("read", srcPath, target.errno);
    const readDest = () => {
      const existing = readSymlink(destDirFd, destName);
      return existing.ok ? existing.value : null;
    };
    const fate = linkFate(target.value, dest, readDest, options);
    const action = fate === "unchanged" ? "unchanged" : "link";
    onItem({ action, src: srcPath, dest: path, detail: printable(target.value) });
    return;
  }
  if (src.kind !== "file") {
    special(src.kind, srcPath, options, onItem);
    return;
  }
  const fate = fileFate(src, dest, options);
  const action = fate === "new" ? "copy" : fate === "unchanged" ? "unchanged" : "replace";
  onItem({ action, src: srcPath, dest: path, detail: "" });
}

/** One line of the plan as --dry-run prints it. */
export function describeItem(item: PlanItem): string {
  switch (item.action) {
    case "skip":
      return `skip ${item.src} (${item.detail})`;
    case "mkdir":
    case "update":
    case "unchanged":
      return `${item.action} ${item.dest}`;
    case "link":
      return `link ${item.dest} -> ${item.detail}`;
    case "copy":
    case "replace":
      return `${item.action} ${item.src} -> ${item.dest}`;
  }
}

/**
 * Where DEST lies relative to a source directory: the same directory, inside it, or neither.
 * Compared by device and inode along DEST's ".." chain, so symlinks and bind mounts cannot
 * hide it.
 */
export function placeOf(src: PathStat, destRootFd: number): "same" | "inside" | "apart" {
  let fd = destRootFd;
  let first = true;
  try {
    for (let depth = 0; depth < 4096; depth++) {
      const here = statFd(fd);
      const stat = here.ok ? here.value : null;
      if (stat === null) return "apart";
      if (stat.dev === src.dev && stat.ino === src.ino) return first ? "same" : "inside";
      const parent = openDirectory(fd, "..", true);
      if (!parent.ok) return "apart";
      const up = statFd(parent.value);
      if (fd !== destRootFd) closeFd(fd);
      fd = parent.value;
      first = false;
      if (up.ok && up.value.dev === stat.dev && up.value.ino === stat.ino) return "apart"; // at /
    }
    return "apart";
  } finally {
    if (fd !== destRootFd) closeFd(fd);
  }
}

/**
 * A missing SRC with a shell pattern in it (`/src/*` in a Kubernetes `command:`, where no shell
 * expands it): say so, and what copies the contents of a directory.
 */
function globHint(src: string): string {
  const star = /[*?[]/.exec(src);
  if (star === null) return "";
  const dir = src.slice(0, src.lastIndexOf("/", star.index) + 1) || "./";
  return `; no shell expanded "${
    star[0]
  }" here: to copy the contents of a directory, give "${dir}."`;
}
