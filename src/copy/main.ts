/** `denit copy` and `denit init`: parse, check, carry out, report. */

import { errorLine, UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { printErr, printOut, printUsageError, visible } from "../common/log.ts";
import { parseSignal, type SignalName, STOP_SIGNALS } from "../common/signals.ts";
import * as fs from "../sys/files.ts";
import { buildCache } from "./cache.ts";
import { COPY_HELP, type CopyInvocation, parseCopyInvocation } from "./cli.ts";
import { CopyError, CopyInterrupted, ensure, fail, must } from "./file.ts";
import { basename, dirname, join, randomHex, resolve } from "../common/paths.ts";
import { closeRoot, CopyTree, describeItem, openRoot, placeOf, removeStale } from "./tree.ts";
import { removeTree } from "./tree.ts";
import type { CopySummary, OpenedRoot, PlanItem, Root } from "./tree.ts";

const encoder = new TextEncoder();

/** A line on stderr; names and arguments in it keep their control characters off the terminal. */
function say(line: string): void {
  printErr(visible(line));
}

/** What stops a copy: a stop request, and HUP, which the runtime arms with TERM and INT. */
const COPY_STOPS: readonly SignalName[] = [...STOP_SIGNALS, "SIGHUP"];

/** Each SRC of `denit copy`: `SRC/.` its contents, `SRC/` SRC followed if a link, else SRC. */
function rootsFor(sources: readonly string[]): Root[] {
  return sources.map((source) => {
    const contents = source === "." || source.endsWith("/.");
    const follow = !contents && source.length > 1 && source.endsWith("/");
    return { src: source, contents, follow, destName: basename(source) };
  });
}

/** What `denit init` copies: the runtime and bundles, then the launcher last. */
function initRoots(): { launcher: Root; rest: Root[] } {
  const here = dirname(Deno.execPath());
  const code = dirname(new URL(Deno.mainModule).pathname);
  const root = (dir: string, destName: string): Root => ({
    src: join(dir, destName),
    contents: false,
    follow: false,
    destName,
  });
  // The halves beside this bundle (a test's bundle may have none).
  const halves = ["denit-features.js", "denit-jobs.js"]
    .filter((half) => fs.statPath(join(code, half), true).ok);
  return {
    launcher: root(here, "denit"),
    rest: [root(here, "deno"), ...["denit.js", ...halves].map((name) => root(code, name))],
  };
}

function formatSummary(mode: string, summary: CopySummary, seconds: number): string {
  const n = (count: number, one: string, many = `${one}s`) =>
    `${count} ${count === 1 ? one : many}`;
  const { files, dirs, links, hardlinks, xattrMisses } = summary;
  const mib = summary.bytes / (1 << 20);
  const rate = seconds > 0 ? mib / seconds : 0;
  const hard = hardlinks > 0 ? `, ${n(hardlinks, "hard link")}` : "";
  const missed = xattrMisses > 0 ? `, ${n(xattrMisses, "attribute")} not copied` : "";
  return `denit ${mode}: ${n(files, "file")}, ${n(dirs, "directory", "directories")}, ` +
    `${n(links, "link")}${hard}, ${mib.toFixed(1)} MiB in ${seconds.toFixed(2)} s ` +
    `(${rate.toFixed(1)} MiB/s); ${summary.unchanged} unchanged, ` +
    `${summary.skipped} skipped${missed}`;
}

/** Makes DEST and its missing parents; returns those it made, deepest last. */
function makeDestination(dest: string): string[] {
  const made: string[] = [];
  const missing: string[] = [];
  for (let path = dest;; path = dirname(path)) {
    const stat = fs.statPath(path, true);
    if (stat.ok) {
      if (stat.value.kind !== "dir") {
        throw new CopyError(
          path === dest
            ? `Cannot copy into "${dest}": DEST must be a directory (it is created if missing)`
            : `Cannot create "${dest}": "${path}" is not a directory`,
        );
      }
      break;
    }
    if (stat.errno !== fs.Errno.ENOENT) fail("inspect", path, stat.errno);
    missing.push(path);
    if (path === "/" || path === ".") break;
  }
  for (const path of missing.reverse()) {
    const result = fs.makeDirectory(fs.AT_FDCWD, path, 0o777);
    if (!result.ok && result.errno !== fs.Errno.EEXIST) {
      fail("create directory", path, result.errno);
    }
    if (result.ok) made.push(path);
  }
  return made;
}

function checkPlace(root: Root, opened: OpenedRoot, destFd: number, dest: string): void {
  if (opened.kind !== "dir") return;
  const place = placeOf(opened.stat, destFd);
  if (place === "apart") return;
  if (root.contents && place === "same") {
    throw new CopyError(
      `Cannot copy "${root.src}" into itself: SRC and DEST are the same directory`,
    );
  }
  const into = root.contents ? dest : `${dest}/${root.destName}`;
  throw new CopyError(`Cannot copy "${root.src}" into "${into}": DEST is inside SRC`);
}

async function copyInto({ dest, roots }: Group, run: CopyTree, dryRun: boolean): Promise<void> {
  const opened: Array<{ root: Root; opened: OpenedRoot }> = [];
  let made: string[] = [];
  let destFd = -1;
  let succeeded = false;
  try {
    for (const root of roots) opened.push({ root, opened: openRoot(root) });
    made = dryRun ? [] : makeDestination(dest);
    const openedDest = fs.openDirectory(fs.AT_FDCWD, dest, true);
    if (openedDest.ok) destFd = openedDest.value;
    else if (!dryRun || openedDest.errno !== fs.Errno.ENOENT) fail("open", dest, openedDest.errno);
    for (const { root, opened: source } of opened) {
      if (destFd >= 0) checkPlace(root, source, destFd, dest);
    }
    await run.run(opened, destFd, dest);
    succeeded = true;
  } finally {
    if (destFd >= 0) fs.closeFd(destFd);
    for (const { opened: source } of opened) closeRoot(source);
    // A failed copy leaves no DEST it made: the directories it created, if still empty.
    if (!succeeded) removeMade(made);
  }
}

/** Removes the directories makeDestination made, deepest first, if still empty. */
function removeMade(made: readonly string[]): void {
  for (const path of made.toReversed()) fs.removeEntry(fs.AT_FDCWD, encoder.encode(path), true);
}

interface Group {
  readonly dest: string;
  readonly roots: Root[];
}

/** Copies each group in turn, one run and one summary line for all; resolves to the exit code. */
async function execute(invocation: CopyInvocation, groups: readonly Group[]): Promise<number> {
  const started = performance.now();
  // A tree as deep as the filesystem allows holds two descriptors per level while walked.
  fs.raiseFileLimit();
  const { mode, dryRun, verbose } = invocation;
  const onItem = (item: PlanItem) => {
    if (item.action === "skip") {
      say(`denit ${mode}: skipping "${item.src}": it is a ${item.detail}`);
    }
    if (dryRun) printOut(visible(describeItem(item)));
    else if (verbose) say(describeItem(item));
  };
  const warn = (line: string) => say(`denit ${mode}: warning: ${line}`);
  const run = new CopyTree(invocation, warn, onItem);
  const listeners = COPY_STOPS.map((name) => {
    const listener = () => run.interrupt(parseSignal(name));
    Deno.addSignalListener(name, listener);
    return [name, listener] as const;
  });
  try {
    for (const group of groups) await copyInto(group, run, dryRun);
  } finally {
    for (const [name, listener] of listeners) Deno.removeSignalListener(name, listener);
  }
  if (!invocation.dryRun) {
    printErr(formatSummary(invocation.mode, run.summary, (performance.now() - started) / 1000));
  }
  return ExitCode.OK;
}

/** Where `denit init` stages denit's own files in DEST; a later init removes one left behind. */
const STAGING_PREFIX = ".denit-init-";

/**
 * `denit init`: denit's files are staged in DEST, the --with files copied, then denit's renamed
 * into place, the launcher last: a failure leaves DEST's denit as it was, or none.
 */
async function install(invocation: CopyInvocation, own: Root[], more: Root[]): Promise<number> {
  const dest = resolve(invocation.dest);
  if (invocation.dryRun) return await execute(invocation, [{ dest, roots: [...own, ...more] }]);
  const made = makeDestination(dest);
  let destFd = -1;
  let installed = false;
  const stagingName = `${STAGING_PREFIX}${randomHex(4)}`;
  const staging = encoder.encode(stagingName);
  try {
    destFd = must(fs.openDirectory(fs.AT_FDCWD, dest, true), "open", dest);
    removeStale(destFd, new RegExp(`^${STAGING_PREFIX}`));
    const created = fs.makeDirectory(destFd, staging, 0o700);
    ensure(created, "create directory", join(dest, stagingName));
    for (const root of own) linkUnchanged(destFd, `${stagingName}/${root.destName}`, root.destName);
    const code = await execute(invocation, [
      { dest: join(dest, stagingName), roots: own },
      { dest, roots: more },
    ]);
    for (const root of own) {
      const from = encoder.encode(`${stagingName}/${root.destName}`);
      const moved = fs.renameEntry(destFd, from, destFd, encoder.encode(root.destName));
      ensure(moved, "replace", join(dest, root.destName));
    }
    installed = true;
    return code;
  } finally {
    if (destFd >= 0) {
      removeTree(destFd, staging);
      fs.closeFd(destFd);
    }
    if (!installed) removeMade(made);
  }
}

/** DEST's file `name`, linked as `staged`: the copy finds it there as it is, unchanged or not. */
function linkUnchanged(destFd: number, staged: string, name: string): void {
  const file = fs.openForReading(destFd, name);
  if (!file.ok) return; // not there (a first install), or not a file: copied as usual
  try {
    const stat = fs.statFd(file.value);
    if (stat.ok && stat.value.kind === "file") {
      fs.linkOpenFile(file.value, destFd, encoder.encode(staged));
    }
  } finally {
    fs.closeFd(file.value);
  }
}

/** Runs `denit copy …` or `denit init …`; resolves to the exit code. */
export async function copyMain(args: readonly string[]): Promise<number> {
  const mode = args[0] === "init" ? "init" : "copy";
  let invocation: CopyInvocation | "help";
  try {
    invocation = parseCopyInvocation(args);
  } catch (err: unknown) {
    if (!(err instanceof UsageError)) throw err;
    const line = COPY_HELP.split("\n")[mode === "copy" ? 0 : 1]?.trim() ?? "";
    const usage = line.startsWith("Usage: ") ? line : `Usage: ${line}`;
    printUsageError(err.message, { prefix: "denit", line: usage, command: `denit ${mode}` });
    return ExitCode.USAGE;
  }
  if (invocation === "help") {
    printOut(COPY_HELP);
    return ExitCode.OK;
  }
  try {
    const roots = rootsFor(invocation.sources);
    if (invocation.mode === "copy") {
      return await execute(invocation, [{ dest: resolve(invocation.dest), roots }]);
    }
    const { launcher, rest } = initRoots();
    const code = await install(invocation, [...rest, launcher], roots);
    const dest = resolve(invocation.dest);
    if (invocation.dryRun) return code;
    // The runtime's cache, for DEST's own paths (its keys hold them); made again at each init.
    await buildCache(dest).catch((err: unknown) =>
      say(`denit init: ${dest} has no runtime cache (denit starts slower): ${errorLine(err)}`)
    );
    printOut(`entrypoint: ${JSON.stringify([join(dest, "denit"), "--"])}`);
    return code;
  } catch (err: unknown) {
    if (err instanceof CopyInterrupted) {
      printErr(`denit ${mode}: interrupted by signal ${err.signo}; no temporary file left`);
      return ExitCode.SIGNAL_BASE + err.signo;
    }
    if (err instanceof CopyError) {
      say(`denit ${mode}: ${err.message}`);
      return ExitCode.FAILED;
    }
    throw err;
  }
}
