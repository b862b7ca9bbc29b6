/**
 * Copy mode's one pass: each entry is decided once against DEST. Nothing in DEST changes before
 * the walk ends (new names are temporary, renames wait), so a failure leaves DEST as it was.
 */

import {
  AT_FDCWD,
  closeFd,
  type DirEntry,
  Errno,
  type FileKind,
  listDirectory,
  makeDirectory,
  makeSymlink,
  openDirectory,
  type PathStat,
  readSymlink,
  readXattrs,
  removeEntry,
  setEntryOwner,
  setEntryTimes,
  setFdMode,
  setFdOwner,
  setFdTimes,
  statAt,
  statFd,
  statPath,
  syncFd,
} from "../sys/files.ts";
import {
  CopyError,
  copyFile,
  type CopyOptions,
  copyXattrs,
  fail,
  type Owner,
  putInPlace,
  StopFlag,
  writeXattrs,
  type XattrMiss,
} from "./file.ts";
import { bytesOf, compareNames, display, isTempName, sameBytes, tempName } from "./names.ts";
import { printable } from "../common/log.ts";

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

export interface TreeOptions extends CopyOptions {
  readonly strict: boolean;
  readonly dryRun: boolean;
}

/** One line of the plan, for --dry-run and -v. */
export interface PlanItem {
  readonly action: "mkdir" | "update" | "unchanged" | "copy" | "replace" | "link" | "skip";
  readonly src: string;
  readonly dest: string;
  readonly detail: string;
}

export interface CopySummary {
  files: number;
  dirs: number;
  links: number;
  hardlinks: number;
  bytes: number;
  unchanged: number;
  skipped: number;
  /** Extended attributes that could not be copied (each also warned about once). */
  xattrMisses: number;
}

/** Entries walked between two turns of the event loop, where a stop signal is heard. */
const SIGNAL_TURN_ENTRIES = 256;

function sameTime(a: PathStat, b: PathStat): boolean {
  return a.mtime.sec === b.mtime.sec && a.mtime.nsec === b.mtime.nsec;
}

function sameOwner(dest: PathStat, owner: Owner | null): boolean {
  return owner === null || (dest.uid === owner.uid && dest.gid === owner.gid);
}

/** statAt that reads ENOENT as "nothing there"; any other failure is a CopyError. */
function statIfThere(dirFd: number, name: Uint8Array, path: string): PathStat | null {
  const result = statAt(dirFd, name);
  if (result.ok) return result.value;
  if (result.errno === Errno.ENOENT) return null;
  fail("inspect", path, result.errno);
}

/** Refusals of a destination that exists where SRC has `kind`. */
function checkDestination(kind: FileKind, dest: PathStat | null, path: string): void {
  if (dest === null || (kind === "dir" && dest.kind === "dir")) return;
  if (kind === "dir" && dest.kind === "link") {
    throw new CopyError(`Refusing to write through the symlink "${path}"`);
  }
  if (kind === "dir") {
    throw new CopyError(`Cannot put a directory at "${path}": a ${dest.kind} is there`);
  }
  if (dest.kind === "dir") {
    throw new CopyError(
      `Cannot put a ${kind === "link" ? "link" : "file"} at "${path}": a directory is there`,
    );
  }
}

function openDir(dirFd: number, name: Uint8Array, path: string): number {
  const opened = openDirectory(dirFd, name);
  if (!opened.ok) fail("read", path, opened.errno);
  return opened.value;
}

/** Entries of an open directory, sorted by name bytes (a stable order for plans and tests). */
function sortedEntries(fd: number, path: string): DirEntry[] {
  const listed = listDirectory(fd);
  if (!listed.ok) fail("read", path, listed.errno);
  return listed.value.sort((a, b) => compareNames(a.name, b.name));
}

/** Removes a directory tree below dirFd, by descriptors (no path is followed). */
export function removeTree(dirFd: number, name: Uint8Array): void {
  const opened = openDirectory(dirFd, name);
  if (!opened.ok) {
    removeEntry(dirFd, name, false); // not a directory (or gone): a file or a link
    return;
  }
  try {
    const listed = listDirectory(opened.value);
    for (const entry of listed.ok ? listed.value : []) {
      if (entry.kind === "dir" || !removeEntry(opened.value, entry.name, false).ok) {
        removeTree(opened.value, entry.name);
      }
    }
  } finally {
    closeFd(opened.value);
  }
  removeEntry(dirFd, name, true);
}

/** Removes what a killed earlier run left in a directory (`.denit-` and 12 hex digits). */
function removeStaleTemps(dirFd: number): void {
  const listed = listDirectory(dirFd);
  for (const entry of listed.ok ? listed.value : []) {
    if (isTempName(entry.name)) removeTree(dirFd, entry.name);
  }
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
    const trimmed = root.src.replace(/\/+$/, "");
    throw new CopyError(
      `Cannot copy "${root.src}" under a name: use "${trimmed}/." to copy its contents`,
    );
  }
  const follow = root.contents || root.follow;
  const stat = statPath(root.src, follow);
  if (!stat.ok && stat.errno === Errno.ENOENT) {
    throw new CopyError(
      `Cannot copy "${root.src}": no such file or directory${globHint(root.src)}`,
    );
  }
  if (!stat.ok) fail("inspect", root.src, stat.errno);
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
  const name = bytesOf(root.src.slice(slash + 1).replace(/\/+$/, ""));
  return { kind: "entry", parentFd: parentFd.value, name, stat: stat.value };
}

export function closeRoot(opened: OpenedRoot): void {
  closeFd(opened.kind === "dir" ? opened.fd : opened.parentFd);
}

/** A missing SRC with a shell pattern in it (no shell expanded it): what to give instead. */
function globHint(src: string): string {
  const star = /[*?[]/.exec(src);
  if (star === null) return "";
  const dir = src.slice(0, src.lastIndexOf("/", star.index) + 1) || "./";
  return `; no shell expanded "${
    star[0]
  }" here: to copy the contents of a directory, give "${dir}."`;
}

/** Where DEST lies relative to a source directory, by device and inode along its ".." chain. */
export function placeOf(src: PathStat, destRootFd: number): "same" | "inside" | "apart" {
  let fd = destRootFd;
  try {
    for (let depth = 0; depth < 4096; depth++) {
      const here = statFd(fd);
      if (!here.ok) return "apart";
      if (here.value.dev === src.dev && here.value.ino === src.ino) {
        return depth === 0 ? "same" : "inside";
      }
      const parent = openDirectory(fd, "..", true);
      if (!parent.ok) return "apart";
      const up = statFd(parent.value);
      if (fd !== destRootFd) closeFd(fd);
      fd = parent.value;
      if (up.ok && up.value.dev === here.value.dev && up.value.ino === here.value.ino) {
        return "apart"; // at /
      }
    }
    return "apart";
  } finally {
    if (fd !== destRootFd) closeFd(fd);
  }
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

/** A directory being walked: its source, and its destination (-1: none yet, in a dry run). */
interface Dir {
  readonly srcFd: number;
  readonly srcPath: string;
  readonly destFd: number;
  readonly destPath: string;
  readonly stat: PathStat;
  /** Made by this run: nothing in it to compare with, and its entries need no temporary name. */
  readonly fresh: boolean;
  /** An existing one whose mode, times or owner differ from the source's. */
  readonly update: boolean;
  /** Its descriptors are this walk's to close (a root's source and DEST are the caller's). */
  readonly ownsSrc: boolean;
  readonly ownsDest: boolean;
  readonly entries: DirEntry[];
  index: number;
  /** Something was written in it (its times are set again at the end). */
  touched: boolean;
}

/** What waits for the end of the walk: a rename into place, or an existing directory's attributes. */
interface Pending {
  readonly run: () => void;
  /** What a failure before `run` removes. */
  readonly undo: (() => void) | null;
}

/** One copy; `run` once per group of roots into one DEST. */
export class CopyTree {
  readonly #options: TreeOptions;
  readonly #warn: (line: string) => void;
  readonly #onItem: (item: PlanItem) => void;
  readonly #stop = new StopFlag();
  /** Hard-linked sources copied: "dev:ino" → the open copy, to link their other names to. */
  readonly #linked = new Map<string, number>();
  readonly #warned = new Set<string>();
  #pending: Pending[] = [];
  /** Descriptors of existing directories, used by what is pending: closed at the end. */
  #held: number[] = [];
  readonly summary: CopySummary = {
    files: 0,
    dirs: 0,
    links: 0,
    hardlinks: 0,
    bytes: 0,
    unchanged: 0,
    skipped: 0,
    xattrMisses: 0,
  };

  constructor(
    options: TreeOptions,
    warn: (line: string) => void,
    onItem: (item: PlanItem) => void,
  ) {
    this.#options = options;
    this.#warn = warn;
    this.#onItem = onItem;
  }

  /** Records a stop signal: the walk stops at its next check and removes what it wrote. */
  interrupt(signo: number): void {
    this.#stop.stop(signo);
  }

  /** Copies every root into DEST (-1: absent, in a dry run), then puts everything in place. */
  async run(
    roots: ReadonlyArray<{ root: Root; opened: OpenedRoot }>,
    destFd: number,
    destPath: string,
  ): Promise<void> {
    let done = 0;
    try {
      if (!this.#options.dryRun) removeStaleTemps(destFd);
      for (const { root, opened } of roots) await this.#copyRoot(root, opened, destFd, destPath);
      for (; done < this.#pending.length; done++) this.#pending[done]?.run();
    } finally {
      for (const pending of this.#pending.slice(done).reverse()) pending.undo?.();
      this.#pending = [];
      for (const fd of this.#held) closeFd(fd);
      this.#held = [];
      for (const fd of this.#linked.values()) closeFd(fd);
      this.#linked.clear();
    }
  }

  async #copyRoot(root: Root, opened: OpenedRoot, destFd: number, destPath: string) {
    const destName = bytesOf(root.destName);
    // DEST's descriptor is -1 in a dry run where it does not exist: nothing in it to compare.
    const missing = destFd < 0;
    const owns = { ownsSrc: false, ownsDest: false };
    if (opened.kind === "entry") {
      const slash = root.src.lastIndexOf("/");
      const srcPath = slash < 0 ? "." : root.src.slice(0, slash) || "/";
      const { parentFd: srcFd, stat } = opened;
      const into = { srcFd, srcPath, destFd, destPath, stat, fresh: missing, update: false };
      const parent = this.#dir({ ...into, ...owns }, false);
      await this.#entry(parent, opened.name, stat.kind, destName, stat);
      return;
    }
    const { fd: srcFd, stat } = opened;
    if (root.contents) {
      const dest = statPath(destPath, true);
      const update = this.#dirItem(stat, dest.ok ? dest.value : null, root.src, destPath);
      const srcPath = root.src.replace(/\/\.?$/, "") || "/";
      const top = { srcFd, srcPath, destFd, destPath, stat, fresh: missing, update };
      await this.#walk(this.#dir({ ...top, ...owns }, true));
      return;
    }
    const into = { srcFd: -1, srcPath: "", destFd, destPath, stat, fresh: missing, update: false };
    const parent = this.#dir({ ...into, ...owns }, false);
    await this.#walk(this.#subdirectory(parent, srcFd, destName, stat, root.src, false));
  }

  #dir(fields: Omit<Dir, "entries" | "index" | "touched">, list: boolean): Dir {
    const entries = list ? sortedEntries(fields.srcFd, fields.srcPath) : [];
    return { ...fields, entries, index: 0, touched: false };
  }

  async #walk(top: Dir): Promise<void> {
    const stack = [top];
    try {
      for (let step = 1; stack.length > 0; step++) {
        // A turn of the event loop now and then: a stop signal is heard only there.
        if (step % SIGNAL_TURN_ENTRIES === 0) await new Promise((resolve) => setTimeout(resolve));
        this.#stop.check();
        const dir = stack.at(-1) as Dir; // the loop's condition says there is one
        const entry = dir.entries[dir.index++];
        if (entry === undefined) {
          stack.pop();
          this.#leave(dir);
          continue;
        }
        const srcPath = display(dir.srcPath, entry.name);
        const kind = entry.kind ?? statIfThere(dir.srcFd, entry.name, srcPath)?.kind;
        if (kind === undefined) continue; // gone between listing and looking
        if (kind !== "dir") {
          await this.#entry(dir, entry.name, kind, entry.name, null);
          continue;
        }
        const stat = statIfThere(dir.srcFd, entry.name, srcPath);
        if (stat === null) continue;
        const srcFd = openDir(dir.srcFd, entry.name, srcPath);
        try {
          stack.push(this.#subdirectory(dir, srcFd, entry.name, stat, srcPath, true));
        } catch (err: unknown) {
          closeFd(srcFd);
          throw err;
        }
      }
    } finally {
      for (const dir of stack) this.#close(dir);
    }
  }

  /** The item for a directory; true if an existing one's attributes must be set. */
  #dirItem(src: PathStat, dest: PathStat | null, srcPath: string, destPath: string): boolean {
    const same = dest !== null && dest.mode === src.mode && sameTime(dest, src) &&
      sameOwner(dest, this.#options.owner);
    const action = dest === null ? "mkdir" : same ? "unchanged" : "update";
    this.#onItem({ action, src: srcPath, dest: destPath, detail: "" });
    return !same;
  }

  /** A directory of SRC in `parent`: made (under a temporary name unless `parent` is new), or opened. */
  #subdirectory(
    parent: Dir,
    srcFd: number,
    name: Uint8Array,
    stat: PathStat,
    srcPath: string,
    ownsSrc: boolean,
  ): Dir {
    const destPath = display(parent.destPath, name);
    const dest = parent.fresh ? null : statIfThere(parent.destFd, name, destPath);
    checkDestination("dir", dest, destPath);
    const update = this.#dirItem(stat, dest, srcPath, destPath);
    const here = { srcFd, srcPath, destPath, stat, update, ownsSrc, ownsDest: true };
    if (dest !== null) {
      const destFd = openDir(parent.destFd, name, destPath);
      if (!this.#options.dryRun) removeStaleTemps(destFd);
      return this.#dir({ ...here, destFd, fresh: false }, true);
    }
    if (this.#options.dryRun) return this.#dir({ ...here, destFd: -1, fresh: true }, true);
    const temp = parent.fresh ? null : tempName();
    // 0700 until it is finished: nobody else gets in while it is being filled.
    const made = makeDirectory(parent.destFd, temp ?? name, 0o700);
    if (!made.ok) fail("create directory", destPath, made.errno);
    const parentFd = parent.destFd;
    if (temp !== null) {
      this.#pending.push({
        run: () => putInPlace(parentFd, temp, name, () => destPath, "create"),
        undo: () => removeTree(parentFd, temp),
      });
    }
    parent.touched = true;
    const opened = openDirectory(parentFd, temp ?? name);
    if (!opened.ok) fail("create directory", destPath, opened.errno);
    return this.#dir({ ...here, destFd: opened.value, fresh: true }, true);
  }

  /** A directory's walk ended: a new one is finished now, an existing one at the end. */
  #leave(dir: Dir): void {
    const writes = !this.#options.dryRun && dir.destFd >= 0;
    if (writes && !dir.fresh && (dir.update || dir.touched)) {
      // The source's attributes are read now; the destination stays open for what is pending.
      const attrs = readXattrs(dir.srcFd);
      if (dir.ownsSrc) closeFd(dir.srcFd);
      if (dir.ownsDest) this.#held.push(dir.destFd);
      this.#pending.push({ run: () => this.#finishDir(dir, attrs), undo: null });
      return;
    }
    try {
      if (writes && dir.fresh) this.#finishDir(dir);
    } finally {
      this.#close(dir);
    }
  }

  #close(dir: Dir): void {
    if (dir.ownsSrc) closeFd(dir.srcFd);
    if (dir.ownsDest && dir.destFd >= 0) closeFd(dir.destFd);
  }

  /** A directory's owner, mode, attributes, flush and times, once everything in it is in place. */
  #finishDir(dir: Dir, attrs = readXattrs(dir.srcFd)): void {
    const { owner, sync } = this.#options;
    if (owner !== null) {
      const owned = setFdOwner(dir.destFd, owner.uid, owner.gid);
      if (!owned.ok) fail("change the owner of", dir.destPath, owned.errno);
    }
    const mode = setFdMode(dir.destFd, dir.stat.mode);
    if (!mode.ok) fail("set the mode of", dir.destPath, mode.errno);
    for (const miss of writeXattrs(attrs, dir.destFd, () => dir.destPath)) this.#missed(miss);
    if (sync) {
      const synced = syncFd(dir.destFd);
      // Some filesystems cannot fsync a directory (EINVAL): their renames are as durable.
      if (!synced.ok && synced.errno !== Errno.EINVAL) fail("flush", dir.destPath, synced.errno);
    }
    const times = setFdTimes(dir.destFd, dir.stat.atime, dir.stat.mtime);
    if (!times.ok) fail("set the times of", dir.destPath, times.errno);
    if (dir.fresh || dir.update) this.summary.dirs++;
  }

  /** A file, a link or a special file of `dir`, as `destName` in its destination. */
  async #entry(
    dir: Dir,
    name: Uint8Array,
    kind: FileKind,
    destName: Uint8Array,
    known: PathStat | null,
  ): Promise<void> {
    const srcPath = display(dir.srcPath, name);
    const destPath = display(dir.destPath, destName);
    if (kind !== "file" && kind !== "link") {
      if (this.#options.strict) {
        throw new CopyError(`Refusing to copy "${srcPath}": it is a ${kind} (--strict)`);
      }
      this.#onItem({ action: "skip", src: srcPath, dest: "", detail: kind });
      this.summary.skipped++;
      return;
    }
    const dest = dir.fresh || dir.destFd < 0 ? null : statIfThere(dir.destFd, destName, destPath);
    checkDestination(kind, dest, destPath);
    // In a new directory nothing is compared: no statx of the source (the copy reads it open).
    const stat = known ?? (dest === null && kind === "file" ? null : statIfThere(
      dir.srcFd,
      name,
      srcPath,
    ));
    if (stat === null && dest !== null) return; // gone between listing and looking
    if (kind === "link") {
      if (stat !== null) this.#link(dir, name, destName, stat, dest, srcPath, destPath);
      return;
    }
    const same = stat !== null && dest !== null && dest.kind === "file" &&
      dest.size === stat.size && dest.mode === (this.#options.fileMode ?? stat.mode) &&
      sameTime(dest, stat) && sameOwner(dest, this.#options.owner);
    const action = same ? "unchanged" : dest === null ? "copy" : "replace";
    this.#onItem({ action, src: srcPath, dest: destPath, detail: "" });
    if (same) this.summary.unchanged++;
    if (same || this.#options.dryRun) return;
    dir.touched = true;
    const target = this.#target(dir, destName, destPath);
    const job = { srcDir: dir.srcFd, name, destDir: dir.destFd, target, srcPath, destPath };
    const result = await copyFile(job, this.#options, this.#stop, this.#linked);
    if (result.linked) this.summary.hardlinks++;
    else this.summary.files++;
    this.summary.bytes += result.bytes;
    for (const miss of result.misses) this.#missed(miss);
  }

  /** The name to write under: its own in a new directory, else a temporary one renamed later. */
  #target(dir: Dir, name: Uint8Array, destPath: string): Uint8Array {
    if (dir.fresh) return name;
    const temp = tempName();
    const dirFd = dir.destFd;
    this.#pending.push({
      run: () => putInPlace(dirFd, temp, name, () => destPath),
      undo: () => removeEntry(dirFd, temp, false),
    });
    return temp;
  }

  #link(
    dir: Dir,
    name: Uint8Array,
    destName: Uint8Array,
    stat: PathStat,
    dest: PathStat | null,
    srcPath: string,
    destPath: string,
  ): void {
    const target = readSymlink(dir.srcFd, name);
    if (!target.ok) fail("read", srcPath, target.errno);
    const existing = dest?.kind === "link" && sameOwner(dest, this.#options.owner)
      ? readSymlink(dir.destFd, destName)
      : null;
    const same = existing?.ok === true && sameBytes(existing.value, target.value);
    const detail = printable(target.value);
    this.#onItem({ action: same ? "unchanged" : "link", src: srcPath, dest: destPath, detail });
    if (same) this.summary.unchanged++;
    if (same || this.#options.dryRun) return;
    dir.touched = true;
    const at = this.#target(dir, destName, destPath);
    const made = makeSymlink(target.value, dir.destFd, at);
    if (!made.ok) fail("create the link", destPath, made.errno);
    const { owner } = this.#options;
    if (owner !== null) {
      const owned = setEntryOwner(dir.destFd, at, owner.uid, owner.gid);
      if (!owned.ok) fail("change the owner of", destPath, owned.errno);
    }
    const to = { dirFd: dir.destFd, name: at };
    for (const miss of copyXattrs({ dirFd: dir.srcFd, name }, to, () => destPath)) {
      this.#missed(miss);
    }
    const times = setEntryTimes(dir.destFd, at, stat.atime, stat.mtime);
    if (!times.ok) fail("set the times of", destPath, times.errno);
    this.summary.links++;
  }

  #missed(miss: XattrMiss): void {
    this.summary.xattrMisses++;
    const key = `${miss.attr}:${miss.errno}`;
    if (this.#warned.has(key)) return;
    this.#warned.add(key);
    this.#warn(
      `cannot copy the extended attribute "${miss.attr}" of "${miss.path}": ${
        miss.errno === Errno.EPERM ? "Operation not permitted" : `errno ${miss.errno}`
      } (further failures of this attribute are only counted)`,
    );
  }
}
