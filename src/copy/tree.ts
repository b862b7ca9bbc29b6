/**
 * Copy mode's one pass: each entry is decided once against DEST. Nothing in DEST changes before
 * the walk ends (new names are temporary, renames wait), so a failure leaves DEST as it was.
 */

import * as fs from "../sys/files.ts";
import { printable } from "../common/log.ts";
import { randomHex } from "../common/paths.ts";
import { CopyError, copyFile, ensure, finish, must, putInPlace, StopFlag } from "./file.ts";
import type { CopyOptions, XattrMiss } from "./file.ts";

const encoder = new TextEncoder();

/** A path for messages: `base/name`, with bytes that are not UTF-8 shown as \xNN. */
function display(base: string, name: Uint8Array): string {
  return `${base}/${printable(name)}`;
}

/** A temporary name: `.denit-` and 12 hex digits, 19 bytes whatever the final name. */
function tempName(): Uint8Array {
  return encoder.encode(`.denit-${randomHex(6)}`);
}

/** Byte-wise order of names (a stable order for plans and tests); 0 only for equal names. */
function compareNames(a: Uint8Array, b: Uint8Array): number {
  for (let i = 0; i < a.length && i < b.length; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return a.length - b.length;
}

/**
 * One SRC of the command line: `contents` for `SRC/.` (its entries go into DEST itself), `follow`
 * for `SRC/` (a symlink at SRC is followed, as by `cp -a SRC/`), and its name in DEST.
 */
export interface Root {
  readonly src: string;
  readonly contents: boolean;
  readonly follow: boolean;
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

const NOTHING_COPIED = {
  files: 0,
  dirs: 0,
  links: 0,
  hardlinks: 0,
  bytes: 0,
  unchanged: 0,
  skipped: 0,
  xattrMisses: 0,
};

/** What a copy did, for its summary line. */
export type CopySummary = typeof NOTHING_COPIED;

/** Entries walked between two turns of the event loop, where a stop signal is heard. */
const SIGNAL_TURN_ENTRIES = 256;

function sameTime(a: fs.PathStat, b: fs.PathStat): boolean {
  return a.mtime.sec === b.mtime.sec && a.mtime.nsec === b.mtime.nsec;
}

function sameOwner(dest: fs.PathStat, owner: CopyOptions["owner"]): boolean {
  return owner === null || (dest.uid === owner.uid && dest.gid === owner.gid);
}

/** statAt that reads ENOENT as "nothing there"; any other failure is a CopyError. */
function statIfThere(dirFd: number, name: Uint8Array, path: string): fs.PathStat | null {
  const result = fs.statAt(dirFd, name);
  if (!result.ok && result.errno === fs.Errno.ENOENT) return null;
  return must(result, "inspect", path);
}

/** Refuses a destination that exists where SRC has `kind`, unless both are (or are not) dirs. */
function checkDestination(kind: fs.FileKind, dest: fs.PathStat | null, path: string): void {
  if (dest === null || (kind === "dir") === (dest.kind === "dir")) return;
  throw new CopyError(
    kind !== "dir"
      ? `Cannot put a ${kind === "link" ? "link" : "file"} at "${path}": a directory is there`
      : dest.kind === "link"
      ? `Refusing to write through the symlink "${path}"`
      : `Cannot put a directory at "${path}": a ${dest.kind} is there`,
  );
}

/** Removes a directory tree below dirFd, by descriptors (no path is followed). */
export function removeTree(dirFd: number, name: Uint8Array): void {
  const opened = fs.openDirectory(dirFd, name);
  if (!opened.ok) {
    fs.removeEntry(dirFd, name, false); // not a directory (or gone): a file or a link
    return;
  }
  try {
    const listed = fs.listDirectory(opened.value);
    for (const entry of listed.ok ? listed.value : []) {
      if (entry.kind === "dir" || !fs.removeEntry(opened.value, entry.name, false).ok) {
        removeTree(opened.value, entry.name);
      }
    }
  } finally {
    fs.closeFd(opened.value);
  }
  fs.removeEntry(dirFd, name, true);
}

/** The names `tempName()` makes. */
const TEMP_NAME = /^\.denit-[0-9a-f]{12}$/;

/** Removes what a killed earlier run left in a directory: the names `stale` matches. */
export function removeStale(dirFd: number, stale: RegExp): void {
  const listed = fs.listDirectory(dirFd);
  for (const { name } of listed.ok ? listed.value : []) {
    if (stale.test(new TextDecoder().decode(name))) removeTree(dirFd, name);
  }
}

/** The source of a root, opened: a directory to walk, or one entry of its parent. */
export type OpenedRoot =
  | { kind: "dir"; fd: number; stat: fs.PathStat }
  | { kind: "entry"; parentFd: number; name: Uint8Array; stat: fs.PathStat };

/** Opens SRC as the root says; a CopyError if it is missing or not what it must be. */
export function openRoot(root: Root): OpenedRoot {
  const trimmed = root.src.replace(/\/+$/, "");
  if (!root.contents && root.destName === "") {
    throw new CopyError(
      `Cannot copy "${root.src}" under a name: use "${trimmed}/." to copy its contents`,
    );
  }
  const follow = root.contents || root.follow;
  const found = fs.statPath(root.src, follow);
  if (!found.ok && found.errno === fs.Errno.ENOENT) {
    throw new CopyError(
      `Cannot copy "${root.src}": no such file or directory${globHint(root.src)}`,
    );
  }
  const stat = must(found, "inspect", root.src);
  if (root.contents && stat.kind !== "dir") {
    throw new CopyError(`Cannot copy the contents of "${root.src}": not a directory`);
  }
  if (stat.kind === "dir") {
    const fd = must(fs.openDirectory(fs.AT_FDCWD, root.src, follow), "read", root.src);
    return { kind: "dir", fd, stat };
  }
  const slash = trimmed.lastIndexOf("/");
  const parent = slash < 0 ? "." : slash === 0 ? "/" : root.src.slice(0, slash);
  const parentFd = must(fs.openDirectory(fs.AT_FDCWD, parent, true), "read", parent);
  return { kind: "entry", parentFd, name: encoder.encode(trimmed.slice(slash + 1)), stat };
}

export function closeRoot(opened: OpenedRoot): void {
  fs.closeFd(opened.kind === "dir" ? opened.fd : opened.parentFd);
}

/** A missing SRC with a shell pattern in it (no shell expanded it): what to give instead. */
function globHint(src: string): string {
  const star = /[*?[]/.exec(src);
  if (star === null) return "";
  const [glob] = star;
  const dir = src.slice(0, src.lastIndexOf("/", star.index) + 1) || "./";
  return `; no shell expanded "${glob}" here: to copy the contents of a directory, give "${dir}."`;
}

/** Where DEST lies relative to a source directory, by device and inode along its ".." chain. */
export function placeOf(src: fs.PathStat, destRootFd: number): "same" | "inside" | "apart" {
  let fd = destRootFd;
  try {
    for (let depth = 0; depth < 4096; depth++) {
      const here = fs.statFd(fd);
      if (!here.ok) return "apart";
      if (here.value.dev === src.dev && here.value.ino === src.ino) {
        return depth === 0 ? "same" : "inside";
      }
      const parent = fs.openDirectory(fd, "..", true);
      if (!parent.ok) return "apart";
      const up = fs.statFd(parent.value);
      if (fd !== destRootFd) fs.closeFd(fd);
      fd = parent.value;
      if (up.ok && up.value.dev === here.value.dev && up.value.ino === here.value.ino) {
        return "apart"; // at /
      }
    }
    return "apart";
  } finally {
    if (fd !== destRootFd) fs.closeFd(fd);
  }
}

/** One line of the plan as --dry-run prints it. */
export function describeItem({ action, src, dest, detail }: PlanItem): string {
  if (action === "skip") return `skip ${src} (${detail})`;
  if (action === "link") return `link ${dest} -> ${detail}`;
  return action === "copy" || action === "replace"
    ? `${action} ${src} -> ${dest}`
    : `${action} ${dest}`;
}

/** A directory being walked: its source, and its destination (-1: none yet, in a dry run). */
interface Dir {
  readonly srcFd: number;
  readonly srcPath: string;
  readonly destFd: number;
  readonly destPath: string;
  readonly stat: fs.PathStat;
  /** Made by this run: nothing in it to compare with, and its entries need no temporary name. */
  readonly fresh: boolean;
  /** An existing one whose mode, times or owner differ from the source's. */
  readonly update: boolean;
  /** Its descriptors are this walk's to close (a root's source and DEST are the caller's). */
  readonly ownsSrc: boolean;
  readonly ownsDest: boolean;
  readonly entries: fs.DirEntry[];
  index: number;
  /** Something was written in it (its times are set again at the end). */
  touched: boolean;
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
  /** What waits for the end of the walk (a rename, attributes), and what a failure undoes. */
  #pending: Array<{ run: () => void; undo: (() => void) | null }> = [];
  /** Descriptors of existing directories, used by what is pending: closed at the end. */
  #held: number[] = [];
  readonly summary: CopySummary = { ...NOTHING_COPIED };

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
      if (!this.#options.dryRun) removeStale(destFd, TEMP_NAME);
      for (const { root, opened } of roots) await this.#copyRoot(root, opened, destFd, destPath);
      for (; done < this.#pending.length; done++) this.#pending[done]?.run();
    } finally {
      for (const pending of this.#pending.slice(done).reverse()) pending.undo?.();
      this.#pending = [];
      for (const fd of [...this.#held, ...this.#linked.values()]) fs.closeFd(fd);
      this.#held = [];
      this.#linked.clear();
    }
  }

  async #copyRoot(root: Root, opened: OpenedRoot, destFd: number, destPath: string) {
    const destName = encoder.encode(root.destName);
    // DEST's descriptor is -1 in a dry run where it does not exist: nothing in it to compare.
    // A root's source and DEST are the caller's to close.
    const fresh = destFd < 0;
    const into = { destFd, destPath, fresh, update: false, ownsSrc: false, ownsDest: false };
    if (opened.kind === "entry") {
      const slash = root.src.lastIndexOf("/");
      const srcPath = slash < 0 ? "." : root.src.slice(0, slash) || "/";
      const { parentFd: srcFd, stat } = opened;
      const parent = this.#dir({ ...into, srcFd, srcPath, stat }, false);
      return await this.#entry(parent, opened.name, stat.kind, destName, stat);
    }
    const { fd: srcFd, stat } = opened;
    if (root.contents) {
      const dest = fs.statPath(destPath, true);
      const update = this.#dirItem(stat, dest.ok ? dest.value : null, root.src, destPath);
      const srcPath = root.src.replace(/\/\.?$/, "") || "/";
      return await this.#walk(this.#dir({ ...into, srcFd, srcPath, stat, update }, true));
    }
    const parent = this.#dir({ ...into, srcFd: -1, srcPath: "", stat }, false);
    await this.#walk(this.#subdirectory(parent, srcFd, destName, stat, root.src, false));
  }

  #dir(fields: Omit<Dir, "entries" | "index" | "touched">, list: boolean): Dir {
    const entries = list
      ? must(fs.listDirectory(fields.srcFd), "read", fields.srcPath)
        .sort((a, b) => compareNames(a.name, b.name))
      : [];
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
        const srcFd = must(fs.openDirectory(dir.srcFd, entry.name), "read", srcPath);
        try {
          stack.push(this.#subdirectory(dir, srcFd, entry.name, stat, srcPath, true));
        } catch (err: unknown) {
          fs.closeFd(srcFd);
          throw err;
        }
      }
    } finally {
      for (const dir of stack) this.#close(dir);
    }
  }

  /** The item for a directory; true if an existing one's attributes must be set. */
  #dirItem(src: fs.PathStat, dest: fs.PathStat | null, srcPath: string, destPath: string): boolean {
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
    stat: fs.PathStat,
    srcPath: string,
    ownsSrc: boolean,
  ): Dir {
    const destPath = display(parent.destPath, name);
    const dest = parent.fresh ? null : statIfThere(parent.destFd, name, destPath);
    checkDestination("dir", dest, destPath);
    const update = this.#dirItem(stat, dest, srcPath, destPath);
    const here = { srcFd, srcPath, destPath, stat, update, ownsSrc, ownsDest: true };
    if (dest !== null) {
      const destFd = must(fs.openDirectory(parent.destFd, name), "read", destPath);
      if (!this.#options.dryRun) removeStale(destFd, TEMP_NAME);
      return this.#dir({ ...here, destFd, fresh: false }, true);
    }
    if (this.#options.dryRun) return this.#dir({ ...here, destFd: -1, fresh: true }, true);
    const temp = parent.fresh ? null : tempName();
    const parentFd = parent.destFd;
    // 0700 until it is finished: nobody else gets in while it is being filled.
    ensure(fs.makeDirectory(parentFd, temp ?? name, 0o700), "create directory", destPath);
    if (temp !== null) {
      this.#pending.push({
        run: () => putInPlace(parentFd, temp, name, destPath, "create"),
        undo: () => removeTree(parentFd, temp),
      });
    }
    parent.touched = true;
    const destFd = must(fs.openDirectory(parentFd, temp ?? name), "create directory", destPath);
    return this.#dir({ ...here, destFd, fresh: true }, true);
  }

  /** A directory's walk ended: a new one is finished now, an existing one at the end. */
  #leave(dir: Dir): void {
    const writes = !this.#options.dryRun && dir.destFd >= 0;
    if (writes && !dir.fresh && (dir.update || dir.touched)) {
      // The source's attributes are read now; the destination stays open for what is pending.
      const attrs = fs.readXattrs(dir.srcFd);
      if (dir.ownsSrc) fs.closeFd(dir.srcFd);
      if (dir.ownsDest) this.#held.push(dir.destFd);
      this.#pending.push({ run: () => this.#finishDir(dir, attrs), undo: null });
      return;
    }
    try {
      if (writes && dir.fresh) this.#finishDir(dir, fs.readXattrs(dir.srcFd));
    } finally {
      this.#close(dir);
    }
  }

  #close(dir: Dir): void {
    if (dir.ownsSrc) fs.closeFd(dir.srcFd);
    if (dir.ownsDest && dir.destFd >= 0) fs.closeFd(dir.destFd);
  }

  /** A directory's attributes, once everything in it is in place. */
  #finishDir(dir: Dir, attrs: fs.Outcome<fs.Xattr[]>): void {
    this.#missed(finish(dir.destFd, dir.stat, attrs, dir.stat.mode, this.#options, dir.destPath));
    if (dir.fresh || dir.update) this.summary.dirs++;
  }

  /** A file, a link or a special file of `dir`, as `destName` in its destination. */
  async #entry(
    dir: Dir,
    name: Uint8Array,
    kind: fs.FileKind,
    destName: Uint8Array,
    known: fs.PathStat | null,
  ): Promise<void> {
    const srcPath = display(dir.srcPath, name);
    const destPath = display(dir.destPath, destName);
    const { owner, strict, dryRun } = this.#options;
    if (kind !== "file" && kind !== "link") {
      if (strict) throw new CopyError(`Refusing to copy "${srcPath}": it is a ${kind} (--strict)`);
      this.#onItem({ action: "skip", src: srcPath, dest: "", detail: kind });
      this.summary.skipped++;
      return;
    }
    const dest = dir.fresh || dir.destFd < 0 ? null : statIfThere(dir.destFd, destName, destPath);
    checkDestination(kind, dest, destPath);
    // In a new directory nothing is compared: no statx of the source (the copy reads it open).
    const stat = known ??
      (dest === null && kind === "file" ? null : statIfThere(dir.srcFd, name, srcPath));
    if (stat === null && (dest !== null || kind === "link")) return; // gone since the listing
    let link: Uint8Array | null = null;
    let same: boolean;
    if (kind === "link") {
      link = must(fs.readSymlink(dir.srcFd, name), "read", srcPath);
      const existing = dest?.kind === "link" && sameOwner(dest, owner)
        ? fs.readSymlink(dir.destFd, destName)
        : null;
      same = existing?.ok === true && compareNames(existing.value, link) === 0;
      const action = same ? "unchanged" : "link";
      this.#onItem({ action, src: srcPath, dest: destPath, detail: printable(link) });
    } else {
      same = stat !== null && dest?.kind === "file" && dest.size === stat.size &&
        dest.mode === (this.#options.fileMode ?? stat.mode) && sameTime(dest, stat) &&
        sameOwner(dest, owner);
      const action = same ? "unchanged" : dest === null ? "copy" : "replace";
      this.#onItem({ action, src: srcPath, dest: destPath, detail: "" });
    }
    if (same) this.summary.unchanged++;
    if (same || dryRun) return;
    dir.touched = true;
    const target = this.#target(dir, destName, destPath);
    if (link !== null && stat !== null) {
      ensure(fs.makeSymlink(link, dir.destFd, target), "create the link", destPath);
      const attrs = fs.readXattrs({ dirFd: dir.srcFd, name });
      const to = { dirFd: dir.destFd, name: target };
      this.#missed(finish(to, stat, attrs, null, this.#options, destPath));
      this.summary.links++;
      return;
    }
    const job = { srcDir: dir.srcFd, name, destDir: dir.destFd, target, srcPath, destPath };
    const result = await copyFile(job, this.#options, this.#stop, this.#linked);
    if (result.linked) this.summary.hardlinks++;
    else this.summary.files++;
    this.summary.bytes += result.bytes;
    this.#missed(result.misses);
  }

  /** The name to write under: its own in a new directory, else a temporary one renamed later. */
  #target(dir: Dir, name: Uint8Array, destPath: string): Uint8Array {
    if (dir.fresh) return name;
    const temp = tempName();
    const dirFd = dir.destFd;
    this.#pending.push({
      run: () => putInPlace(dirFd, temp, name, destPath),
      undo: () => fs.removeEntry(dirFd, temp, false),
    });
    return temp;
  }

  #missed(misses: readonly XattrMiss[]): void {
    for (const { attr, path, errno } of misses) {
      this.summary.xattrMisses++;
      const key = `${attr}:${errno}`;
      if (this.#warned.has(key)) continue;
      this.#warned.add(key);
      const why = errno === fs.Errno.EPERM ? "Operation not permitted" : `errno ${errno}`;
      this.#warn(
        `cannot copy the extended attribute "${attr}" of "${path}": ${why} ` +
          "(further failures of this attribute are only counted)",
      );
    }
  }
}
