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

export { ExitCode } from "./src/common/exit_codes.ts";

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

/** Runs denit with the given arguments (without the program name); resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  if (args[0] === "init" || args[0] === "copy") {
    return await (await import("./src/copy/main.ts")).copyMain(args);
  }
  if (args[0] === "job") return await (await jobsModule()).jobMain(args.slice(1));
  if (args[0] === "probe") {
    return await (await import("./src/health/probe.ts")).probeMain(args.slice(1));
  }
  if (args[0] === "bridge") {
    return await (await import("./src/jobs/bridge.ts")).bridgeMain(args.slice(1));
  }
  const inbox = SignalInbox.open();
  // denit's launcher blocked these signals while the runtime booted: they waited, and now
  // that every listener exists the kernel delivers what is pending.
  const launch = launchInfo();
  if (launch !== null) {
    const process = await import("./src/sys/process.ts");
    process.unblockSignals(inbox.signals);
    // On a terminal the launcher lent the runtime /dev/null as stderr while it booted.
    if (launch.stderr !== null) process.moveDescriptor(launch.stderr, 2);
  }
  const { superviseMain } = await import("./src/supervise/main.ts");
  return await superviseMain(args, {
    inbox,
    loadHealth: async () => (await import("./src/health/endpoint.ts")).startHealth,
  });
}

// This module is also the entry of denit's worker threads (new Worker(Deno.mainModule)), where
// import.meta.main is true as well: the worker's name comes first.
const worker = workerName();
if (worker === COPY_WORKER_NAME) (await import("./src/copy/worker.ts")).serveCopyJobs();
else if (worker === HEALTH_WORKER_NAME) (await import("./src/health/worker.ts")).serveHealth();
else if (worker === SPAWN_WORKER_NAME) {
  await (await import("./src/supervise/spawner.ts")).serveSpawns();
} else if (import.meta.main) Deno.exit(await main(Deno.args));
