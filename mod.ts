/**
 * denit: a tini-style PID 1 for containers. Runs one command, forwards signals to it, reaps
 * every zombie, stops what is left over, and exits with the child's status.
 *
 * The entry: dispatch to a program, exit with its code. Its only static imports are the signal
 * inbox and the worker names, so that the inbox's listeners are installed before any other
 * code is loaded (a `docker stop` in the first milliseconds must not be lost).
 *
 * @module
 */

import { SignalInbox } from "./src/supervise/inbox.ts";
import {
  COPY_WORKER_NAME,
  HEALTH_WORKER_NAME,
  SPAWN_WORKER_NAME,
  workerName,
} from "./src/common/workers.ts";

import { launchInfo } from "./src/common/runtime.ts";

import { ExitCode } from "./src/common/exit_codes.ts";

export { ExitCode };

/**
 * The job service's gRPC code (about 450 KB with @grpc/grpc-js), which nothing else may pay
 * for: a specifier the bundler cannot follow keeps it out of dist/denit.js, in a bundle of its
 * own beside it; from the sources and in the compiled binary (`--include`) it is the module.
 */
async function jobsModule(): Promise<typeof import("./src/jobs/entry.ts")> {
  await (await import("./src/jobs/require.ts")).provideRequire();
  const entry = import.meta.url.endsWith(".ts") ? "./src/jobs/entry.ts" : "./denit-jobs.js";
  return await import(entry);
}

/**
 * The optional half (features.ts): copy mode, the probe, the bridge and the health endpoint,
 * which a plain run never loads. In the bundle form it is denit-features.js beside the bundle
 * (a specifier the bundler cannot follow keeps it out of dist/denit.js); from the sources and
 * in the compiled binary (`--include`) it is the module. Rejects with one line that names the
 * file when it cannot be loaded.
 */
async function features(): Promise<typeof import("./features.ts")> {
  const entry = import.meta.url.endsWith(".ts") ? "./features.ts" : "./denit-features.js";
  try {
    return await import(entry);
  } catch (err: unknown) {
    const reason = (err instanceof Error ? err.message : String(err)).split("\n")[0];
    throw new Error(
      `cannot load ${new URL(entry, import.meta.url).pathname}, denit's code for copy mode, ` +
        `the probe, the bridge and the health endpoint (${reason})`,
    );
  }
}

/** `denit init`, `copy`, `probe` and `bridge`, from the optional half; null for any other. */
async function optionalProgram(args: readonly string[]): Promise<number | null> {
  const [name = ""] = args;
  if (!["init", "copy", "probe", "bridge"].includes(name)) return null;
  let half: Awaited<ReturnType<typeof features>>;
  try {
    half = await features();
  } catch (err: unknown) {
    const { printErr } = await import("./src/common/log.ts");
    printErr(`denit: ${err instanceof Error ? err.message : String(err)}`);
    return ExitCode.INTERNAL;
  }
  if (name === "probe") return await (await half.probe()).probeMain(args.slice(1));
  if (name === "bridge") return await (await half.bridge()).bridgeMain(args.slice(1));
  return await (await half.copy()).copyMain(args);
}

/** Runs denit with the given arguments (without the program name); resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  const optional = await optionalProgram(args);
  if (optional !== null) return optional;
  if (args[0] === "job") return await (await jobsModule()).jobMain(args.slice(1));
  const inbox = SignalInbox.open();
  // denit's launcher blocked these signals while the runtime booted: they waited, and now
  // that every listener exists the kernel delivers what is pending.
  const launch = launchInfo();
  if (launch !== null) {
    const process = await import("./src/sys/launch.ts");
    process.unblockSignals(inbox.signals);
    // On a terminal the launcher lent the runtime /dev/null as stderr while it booted.
    if (launch.stderr !== null) process.moveDescriptor(launch.stderr, 2);
  }
  const { superviseMain } = await import("./src/supervise/main.ts");
  return await superviseMain(args, {
    inbox,
    loadHealth: async () => (await (await features()).health()).startHealth,
  });
}

// This module is also the entry of denit's worker threads (new Worker(Deno.mainModule)), where
// import.meta.main is true as well: the worker's name comes first.
const worker = workerName();
if (worker === COPY_WORKER_NAME) (await (await features()).copyWorker()).serveCopyJobs();
else if (worker === HEALTH_WORKER_NAME) (await (await features()).healthWorker()).serveHealth();
else if (worker === SPAWN_WORKER_NAME) {
  await (await import("./src/supervise/spawner.ts")).serveSpawns();
} else if (import.meta.main) Deno.exit(await main(Deno.args));
