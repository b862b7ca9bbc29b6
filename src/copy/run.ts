/**
 * Copy mode, second pass: walk again and write. Every write is relative to a directory
 * descriptor (no path is resolved twice), so a directory swapped for a symlink meanwhile cannot
 * redirect a write out of DEST.
 *
 * - A directory that does not exist yet is made under a temporary name beside its final one,
 *   filled, given its mode and times, and renamed into place: a reader sees it complete or not
 *   at all, and what is inside it needs no temporary names. In an existing directory each file
 *   and link is written under a temporary name and renamed over its destination.
 * - Directories are finished deepest first (mode, owner, attributes, times), when everything in
 *   them is written, counted by references: one for the walk of the directory, one for each
 *   subdirectory being walked.
 * - Hard links (files whose link count is above 1): the first is copied as a file, the others
 *   are made links to it.
 * - A failure or a stop signal removes what is in flight: temporary files and directories not
 *   yet renamed into place. A later run removes what a killed run left (`.denit-` and 12 hex).
 */

import {
  closeFd,
  Errno,
  type FileKind,
  linkOpenFile,
  listDirectory,
  makeDirectory,
  makeSymlink,
  openDirectory,
  type PathStat,
  readSymlink,
  removeEntry,
  setEntryOwner,
  setEntryTimes,
  setFdMode,
  setFdOwner,
  setFdTimes,
  statFd,
  syncFd,
} from "../sys/files.ts";
import {
  checkDestination,
  dirFate,
  fail,
  fileFate,
  kindOf,
  linkFate,
  openDir,
  type OpenedRoot,
  type PlanOptions,
  type Root,
  sortedEntries,
  statIfThere,
} from "./check.ts";
import {
  copyFile,
  CopyInterrupted,
  type CopyOptions,
  copyXattrs,
  type FileJob,
  putInPlace,
  StopFlag,
  type XattrMiss,
} from "./file.ts";
import { bytesOf, display, isTempName, tempName } from "./names.ts";

export { CopyInterrupted };

/** What a copy did. */
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

/** Everything a run is told. */
export type RunOptions = CopyOptions & PlanOptions;

/** Entries walked between two turns of the event loop, where a stop signal is heard. */
const SIGNAL_TURN_ENTRIES = 256;
/** Hard-linked files kept open to link later names to; beyond it, later names are copies. */
const MAX_KEPT = 512;

interface DirNode {
  readonly srcFd: number;
  readonly destFd: number;
  readonly stat: PathStat;
  readonly parent: DirNode | null;
  /** The directory holding this one in DEST (its rename happens there). */
  readonly parentFd: number;
  readonly destName: Uint8Array;
  /** Made under this name, renamed to destName when finished; null: made under its name. */
  readonly temp: Uint8Array | null;
  /** Made by this run: nothing inside it exists yet, so nothing needs comparing. */
  readonly fresh: boolean;
  /** Its mode, times or owner differ from the source's. */
  readonly update: boolean;
  /** Whether finishing closes the descriptors (not those of a root, owned by the caller). */
  readonly closeSrc: boolean;
  readonly closeDest: boolean;
  readonly srcPath: string;
  readonly destPath: string;
  refs: number;
  touched: boolean;
}

interface Frame {
  readonly node: DirNode;
  readonly entries: ReturnType<typeof sortedEntries>;
  index: number;
}

/** Where an entry is copied from and to. */
interface Place {
  readonly srcDir: number;
  readonly name: Uint8Array;
  readonly srcBase: string;
  readonly destDir: number;
  readonly destName: Uint8Array;
  readonly destBase: string;
  /** Its directory was made by this run: nothing to compare, no temporary name needed. */
  readonly fresh: boolean;
  /** The directory being walked (null for a root that is a file or a link). */
  readonly node: DirNode | null;
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
      if (entry.kind === "dir") removeTree(opened.value, entry.name);
      else if (!removeEntry(opened.value, entry.name, false).ok) {
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
  if (!listed.ok) return;
  for (const entry of listed.value) {
    if (!isTempName(entry.name)) continue;
    if (entry.kind === "dir") removeTree(dirFd, entry.name);
    else removeEntry(dirFd, entry.name, false);
  }
}

/** Runs the second pass; one instance per run. */
export class CopyRun {
  readonly #options: RunOptions;
  readonly #warn: (line: string) => void;
  readonly #stop = new StopFlag();
  readonly #live = new Set<DirNode>();
  /** Hard-linked sources already copied: "dev:ino" → the open copy. */
  readonly #linked = new Map<string, number>();
  readonly #warned = new Set<string>();
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

  constructor(options: RunOptions, warn: (line: string) => void) {
    this.#options = options;
    this.#warn = warn;
  }

  /** Records a stop signal: every thread stops at its next check and cleans up. */
  interrupt(signo: number): void {
    this.#stop.stop(signo);
  }

  /**
   * Copies every root into the open DEST directory. Throws CopyError or CopyInterrupted, leaving
   * nothing half-made.
   */
  async run(
    roots: ReadonlyArray<{ root: Root; opened: OpenedRoot }>,
    destRootFd: number,
    destRootPath: string,
  ): Promise<void> {
    try {
      removeStaleTemps(destRootFd);
      for (const { root, opened } of roots) {
        await this.#copyRoot(root, opened, destRootFd, destRootPath);
      }
    } catch (err: unknown) {
      this.#stop.stop(-1);
      this.#abandon();
      throw err;
    } finally {
      for (const fd of this.#linked.values()) closeFd(fd);
    }
  }

  async #copyRoot(root: Root, opened: OpenedRoot, destRootFd: number, destRootPath: string) {
    const destName = bytesOf(root.destName);
    const destPath = root.contents ? destRootPath : `${destRootPath}/${root.destName}`;
    if (opened.kind === "entry") {
      await this.#copyRootEntry(opened, root.src, destRootFd, destName, destPath);
      return;
    }
    let node: DirNode;
    if (root.contents) {
      const destStat = statFd(destRootFd);
      const dest = destStat.ok ? destStat.value : null;
      node = this.#node({
        srcFd: opened.fd,
        destFd: destRootFd,
        stat: opened.stat,
        parent: null,
        parentFd: -1,
        destName,
        temp: null,
        fresh: false,
        update: dest === null || dirFate(opened.stat, dest, this.#options) !== "unchanged",
        closeSrc: false,
        closeDest: false,
        srcPath: root.src.replace(/\/\.$/, "") || "/",
        destPath,
      });
    } else {
      node = this.#subdirectory(
        null,
        destRootFd,
        opened.fd,
        false,
        destName,
        opened.stat,
        root.src,
        destPath,
        false,
      );
    }
    await this.#walk(node);
  }

  #node(fields: Omit<DirNode, "refs" | "touched">): DirNode {
    const node: DirNode = { ...fields, refs: 1, touched: false };
    this.#live.add(node);
    return node;
  }

  /** A directory to walk: made (under a temporary name unless its parent is new) or opened. */
  #subdirectory(
    parent: DirNode | null,
    parentFd: number,
    srcFd: number,
    parentFresh: boolean,
    name: Uint8Array,
    stat: PathStat,
    srcPath: string,
    destPath: string,
    ownsSrc: boolean,
  ): DirNode {
    const dest = parentFresh ? null : statIfThere(parentFd, name, destPath);
    checkDestination("dir", dest, destPath);
    const base = { srcFd, stat, parent, parentFd, destName: name, srcPath, destPath };
    const closing = { closeSrc: ownsSrc, closeDest: true };
    if (dest !== null) {
      const destFd = openDir(parentFd, name, destPath);
      removeStaleTemps(destFd);
      const update = dirFate(stat, dest, this.#options) !== "unchanged";
      return this.#node({ ...base, ...closing, destFd, temp: null, fresh: false, update });
    }
    const temp = parentFresh ? null : tempName();
    // 0700 until it is finished: nobody else gets in while it is being filled.
    const made = makeDirectory(parentFd, temp ?? name, 0o700);
    if (!made.ok) fail("create directory", destPath, made.errno);
    const opened = openDirectory(parentFd, temp ?? name);
    if (!opened.ok) {
      removeEntry(parentFd, temp ?? name, true);
      fail("create directory", destPath, opened.errno);
    }
    if (parent !== null) parent.touched = true;
    return this.#node({
      ...base,
      ...closing,
      destFd: opened.value,
      temp,
      fresh: true,
      update: true,
    });
  }

  async #walk(root: DirNode): Promise<void> {
    const stack: Frame[] = [{
      node: root,
      entries: sortedEntries(root.srcFd, root.srcPath),
      index: 0,
    }];
    for (let step = 1; stack.length > 0; step++) {
      // A turn of the event loop now and then: a stop signal is heard only there.
      if (step % SIGNAL_TURN_ENTRIES === 0) await new Promise((resolve) => setTimeout(resolve, 0));
      this.#stop.check();
      const frame = stack.at(-1);
      if (frame === undefined) break;
      const entry = frame.entries[frame.index++];
      const node = frame.node;
      if (entry === undefined) {
        stack.pop();
        await this.#release(node);
        continue;
      }
      const kind = kindOf(entry, node.srcFd, display(node.srcPath, entry.name));
      if (kind === null) continue; // gone between listing and looking
      if (kind !== "dir") {
        await this.#copyEntry(node, entry.name, kind);
        continue;
      }
      const srcPath = display(node.srcPath, entry.name);
      const stat = statIfThere(node.srcFd, entry.name, srcPath);
      if (stat === null) continue;
      const srcFd = openDir(node.srcFd, entry.name, srcPath);
      let child: DirNode;
      try {
        const destPath = display(node.destPath, entry.name);
        child = this.#subdirectory(
          node,
          node.destFd,
          srcFd,
          node.fresh,
          entry.name,
          stat,
          srcPath,
          destPath,
          true,
        );
      } catch (err: unknown) {
        closeFd(srcFd);
        throw err;
      }
      node.refs++;
      stack.push({ node: child, entries: sortedEntries(srcFd, srcPath), index: 0 });
    }
  }

  /** A root that is a file or a link, into DEST. */
  async #copyRootEntry(
    opened: Extract<OpenedRoot, { kind: "entry" }>,
    src: string,
    destFd: number,
    destName: Uint8Array,
    destPath: string,
  ): Promise<void> {
    const slash = src.lastIndexOf("/");
    const srcBase = slash < 0 ? "." : src.slice(0, slash) || "/";
    const destBase = destPath.slice(0, destPath.lastIndexOf("/")) || "/";
    const where: Place = {
      srcDir: opened.parentFd,
      name: opened.name,
      srcBase,
      destDir: destFd,
      destName,
      destBase,
      fresh: false,
      node: null,
    };
    await this.#copyOne(where, opened.stat.kind, opened.stat);
  }

  /** An entry of a directory being walked: a file, a link or a special file. */
  #copyEntry(node: DirNode, name: Uint8Array, kind: FileKind): Promise<void> {
    const where: Place = {
      srcDir: node.srcFd,
      name,
      srcBase: node.srcPath,
      destDir: node.destFd,
      destName: name,
      destBase: node.destPath,
      fresh: node.fresh,
      node,
    };
    return this.#copyOne(where, kind, null);
  }

  async #copyOne(where: Place, kind: FileKind, known: PathStat | null): Promise<void> {
    const srcPath = () => display(where.srcBase, where.name);
    const destPath = display(where.destBase, where.destName);
    if (kind === "link") {
      const stat = known ?? statIfThere(where.srcDir, where.name, srcPath());
      if (stat !== null) this.#copyLink(where, stat, srcPath(), destPath);
      return;
    }
    if (kind !== "file") {
      this.summary.skipped++;
      return;
    }
    // In a directory this run made, nothing is there to compare with: no statx at all (the
    // copy reads size, mode and times from the open file).
    let stat = known;
    if (!where.fresh) {
      stat ??= statIfThere(where.srcDir, where.name, srcPath());
      if (stat === null) return;
      const dest = statIfThere(where.destDir, where.destName, destPath);
      checkDestination("file", dest, destPath);
      if (fileFate(stat, dest, this.#options) === "unchanged") {
        this.summary.unchanged++;
        return;
      }
    }
    if (where.node !== null) where.node.touched = true;
    if (stat !== null && stat.nlink > 1) return this.#copyLinked(where);
    const result = await copyFile(this.#job(where, false, true), this.#options, this.#stop, true);
    if (result.deferred) await this.#copyLinked(where);
    else this.#count(result.bytes, result.misses);
  }

  #job(where: Place, keep: boolean, deferLinked: boolean): FileJob {
    return {
      srcDir: where.srcDir,
      name: where.name,
      destDir: where.destDir,
      destName: where.destName,
      temp: where.fresh ? null : tempName(),
      srcBase: where.srcBase,
      destBase: where.destBase,
      keep,
      deferLinked,
    };
  }

  /** A file with several links, on the main thread: linked to its first copy, or copied. */
  async #copyLinked(where: Place): Promise<void> {
    const stat = statIfThere(where.srcDir, where.name, display(where.srcBase, where.name));
    if (stat === null) return;
    const key = `${stat.dev}:${stat.ino}`;
    const first = this.#linked.get(key);
    if (first !== undefined) {
      const temp = where.fresh ? null : tempName();
      this.#hardlink(
        first,
        where.destDir,
        where.destName,
        temp,
        display(where.destBase, where.destName),
      );
      return;
    }
    const job = this.#job(where, this.#linked.size < MAX_KEPT, false);
    const result = await copyFile(job, this.#options, this.#stop, true);
    if (result.keptFd !== null) this.#linked.set(key, result.keptFd);
    this.#count(result.bytes, result.misses);
  }

  #count(bytes: number, misses: readonly XattrMiss[]): void {
    this.summary.files++;
    this.summary.bytes += bytes;
    for (const miss of misses) this.#missed(miss);
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

  #hardlink(
    fd: number,
    destDir: number,
    destName: Uint8Array,
    temp: Uint8Array | null,
    destPath: string,
  ) {
    const linked = linkOpenFile(fd, destDir, temp ?? destName);
    if (!linked.ok) fail("link", destPath, linked.errno);
    putInPlace(destDir, temp, destName, () => destPath);
    this.summary.hardlinks++;
  }

  #copyLink(where: Place, stat: PathStat, srcPath: string, destPath: string): void {
    const { srcDir, name, destDir, destName, fresh, node } = where;
    const target = readSymlink(srcDir, name);
    if (!target.ok) fail("read", srcPath, target.errno);
    const dest = fresh ? null : statIfThere(destDir, destName, destPath);
    checkDestination("link", dest, destPath);
    const existing = () => {
      const read = readSymlink(destDir, destName);
      return read.ok ? read.value : null;
    };
    if (linkFate(target.value, dest, existing, this.#options) === "unchanged") {
      this.summary.unchanged++;
      return;
    }
    if (node !== null) node.touched = true;
    const temp = fresh ? null : tempName();
    const made = makeSymlink(target.value, destDir, temp ?? destName);
    if (!made.ok) fail("create the link", destPath, made.errno);
    let done = false;
    try {
      const { owner } = this.#options;
      if (owner !== null) {
        const owned = setEntryOwner(destDir, temp ?? destName, owner.uid, owner.gid);
        if (!owned.ok) fail("change the owner of", destPath, owned.errno);
      }
      const to = { dirFd: destDir, name: temp ?? destName };
      for (const miss of copyXattrs({ dirFd: srcDir, name }, to, () => destPath)) {
        this.#missed(miss);
      }
      const times = setEntryTimes(destDir, temp ?? destName, stat.atime, stat.mtime);
      if (!times.ok) fail("set the times of", destPath, times.errno);
      putInPlace(destDir, temp, destName, () => destPath);
      done = true;
      this.summary.links++;
    } finally {
      if (!done) removeEntry(destDir, temp ?? destName, false);
    }
  }

  /** Drops one reference; at none, finishes the directory and releases its parent. */
  async #release(node: DirNode): Promise<void> {
    if (--node.refs > 0) return;
    this.#finish(node);
    if (node.parent !== null) await this.#release(node.parent);
  }

  #finish(node: DirNode): void {
    const { owner, sync } = this.#options;
    if (node.fresh || node.update || node.touched) {
      if (owner !== null) {
        const owned = setFdOwner(node.destFd, owner.uid, owner.gid);
        if (!owned.ok) fail("change the owner of", node.destPath, owned.errno);
      }
      const mode = setFdMode(node.destFd, node.stat.mode);
      if (!mode.ok) fail("set the mode of", node.destPath, mode.errno);
      for (const miss of copyXattrs(node.srcFd, node.destFd, () => node.destPath)) {
        this.#missed(miss);
      }
      if (sync) {
        const synced = syncFd(node.destFd);
        // Some filesystems cannot fsync a directory (EINVAL): their renames are as durable.
        if (!synced.ok && synced.errno !== Errno.EINVAL) fail("flush", node.destPath, synced.errno);
      }
      const times = setFdTimes(node.destFd, node.stat.atime, node.stat.mtime);
      if (!times.ok) fail("set the times of", node.destPath, times.errno);
      if (node.fresh || node.update) this.summary.dirs++;
    }
    putInPlace(node.parentFd, node.temp, node.destName, () => node.destPath, "create");
    if (sync && node.temp !== null) syncFd(node.parentFd);
    this.#live.delete(node);
    this.#close(node);
  }

  #close(node: DirNode): void {
    if (node.closeSrc) closeFd(node.srcFd);
    if (node.closeDest) closeFd(node.destFd);
  }

  /** After a failure or a stop: removes directories not yet renamed into place, closes all. */
  #abandon(): void {
    for (const node of [...this.#live].reverse()) {
      if (node.temp !== null) removeTree(node.parentFd, node.temp);
    }
    for (const node of this.#live) this.#close(node);
    this.#live.clear();
  }
}
