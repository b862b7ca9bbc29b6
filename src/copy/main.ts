/** `denit copy` and `denit init`: parse, plan, carry out, report. */

import { dirname, join, resolve } from "./paths.ts";
import { UsageError } from "../common/errors.ts";
import { CopyInterrupted, CopyRun, type CopySummary } from "./run.ts";
import { COPY_HELP, type CopyInvocation, parseCopyInvocation } from "./cli.ts";
import { CopyError, describeError, type Item, planCopy, type Root, rootsFor } from "./plan.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { printErr, printOut } from "../common/log.ts";
import { RUN_FLAGS } from "../common/runtime.ts";
import { parseSignal } from "../common/signals.ts";

/** The signals that stop a copy; their numbers come from the one signal table. */
const STOP_SIGNALS: readonly Deno.Signal[] = ["SIGTERM", "SIGINT", "SIGHUP"];

/** What `denit init` copies for the form denit runs in, and the entrypoint that results. */
export function initRoots(dest: string): { roots: Root[]; entrypoint: string[] } {
  const target = resolve(dest);
  const runtime = Deno.execPath();
  if (Deno.build.standalone) {
    return {
      roots: [{ src: runtime, dest: join(target, "denit"), contents: false }],
      entrypoint: [join(target, "denit"), "--"],
    };
  }
  const main = new URL(Deno.mainModule).pathname;
  const deno: Root = { src: runtime, dest: join(target, "deno"), contents: false };
  if (main.endsWith(".js")) {
    return {
      roots: [deno, { src: main, dest: join(target, "denit.js"), contents: false }],
      entrypoint: [join(target, "deno"), ...RUN_FLAGS, join(target, "denit.js"), "--"],
    };
  }
  // From source: the runtime plus denit's module files.
  const root = dirname(main);
  const code = join(target, "denit-src");
  return {
    roots: [
      deno,
      ...["mod.ts", "init.ts", "src"].map((name) => ({
        src: join(root, name),
        dest: join(code, name),
        contents: false,
      })),
    ],
    entrypoint: [join(target, "deno"), ...RUN_FLAGS, join(code, "mod.ts"), "--"],
  };
}

function describeItem(item: Item): string {
  switch (item.kind) {
    case "special":
      return `skip ${item.src} (${item.stat.kind})`;
    case "dir":
      return `${
        item.fate === "new" ? "mkdir" : item.fate === "unchanged" ? "unchanged" : "update"
      } ${item.dest}`;
    case "link":
      return item.fate === "unchanged"
        ? `unchanged ${item.dest}`
        : `link ${item.dest} -> ${item.target}`;
    case "file":
      return item.fate === "unchanged"
        ? `unchanged ${item.dest}`
        : `${item.fate === "new" ? "copy" : "replace"} ${item.src} -> ${item.dest}`;
  }
}

function formatSummary(mode: string, summary: CopySummary, seconds: number): string {
  const mib = summary.bytes / (1 << 20);
  const rate = seconds > 0 ? mib / seconds : 0;
  return `denit ${mode}: ${summary.files} files, ${summary.dirs} directories, ${summary.links} links, ` +
    `${mib.toFixed(1)} MiB in ${seconds.toFixed(2)} s (${rate.toFixed(1)} MiB/s); ` +
    `${summary.unchanged} unchanged, ${summary.skipped} skipped`;
}

async function execute(invocation: CopyInvocation, roots: Root[]): Promise<number> {
  const started = performance.now();
  const items = planCopy(roots, invocation);
  for (const item of items) {
    if (item.kind === "special") {
      printErr(`denit ${invocation.mode}: skipping "${item.src}": it is a ${item.stat.kind}`);
    }
  }
  if (invocation.dryRun) {
    for (const item of items) printOut(describeItem(item));
    return ExitCode.OK;
  }
  for (const root of roots) {
    try {
      await Deno.mkdir(dirname(root.dest), { recursive: true });
    } catch (err: unknown) {
      throw new CopyError(`Cannot create directory "${dirname(root.dest)}": ${describeError(err)}`);
    }
  }
  const run = new CopyRun(invocation);
  const listeners = STOP_SIGNALS.map((name) => {
    const signo = parseSignal(name);
    const listener = () => run.interrupt(signo);
    Deno.addSignalListener(name, listener);
    return [name, listener] as const;
  });
  try {
    await run.run(items, (item) => {
      if (invocation.verbose) printErr(describeItem(item));
    });
  } finally {
    for (const [name, listener] of listeners) Deno.removeSignalListener(name, listener);
  }
  printErr(formatSummary(invocation.mode, run.summary, (performance.now() - started) / 1000));
  return ExitCode.OK;
}

/** Runs `denit copy …` or `denit init …`; resolves to the exit code. */
export async function copyMain(args: readonly string[]): Promise<number> {
  const mode = args[0] === "init" ? "init" : "copy";
  let invocation: CopyInvocation | "help";
  try {
    invocation = parseCopyInvocation(args);
  } catch (err: unknown) {
    if (!(err instanceof UsageError)) throw err;
    const usage = COPY_HELP.split("\n")[mode === "copy" ? 0 : 1]?.trim() ?? "";
    printErr(`denit: ${err.message}\n${usage}`);
    printErr(`Try 'denit ${mode} --help' for more information.`);
    return ExitCode.USAGE;
  }
  if (invocation === "help") {
    printOut(COPY_HELP);
    return ExitCode.OK;
  }
  try {
    if (invocation.mode === "copy") {
      return await execute(invocation, rootsFor(invocation.sources, invocation.dest));
    }
    const init = initRoots(invocation.dest);
    const code = await execute(invocation, [
      ...init.roots,
      ...rootsFor(invocation.sources, invocation.dest),
    ]);
    if (!invocation.dryRun) printOut(`entrypoint: ${JSON.stringify(init.entrypoint)}`);
    return code;
  } catch (err: unknown) {
    if (err instanceof CopyInterrupted) {
      printErr(`denit ${mode}: interrupted by signal ${err.signo}; no temporary file left`);
      return ExitCode.SIGNAL_BASE + err.signo;
    }
    if (err instanceof CopyError) {
      printErr(`denit ${mode}: ${err.message}`);
      return ExitCode.COPY_FAILED;
    }
    throw err;
  }
}
