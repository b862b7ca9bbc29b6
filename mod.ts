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

export { ExitCode } from "./src/common/exit_codes.ts";

/** Runs denit with the given arguments (without the program name); resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  if (args[0] === "init" || args[0] === "copy") {
    return await (await import("./src/copy/main.ts")).copyMain(args);
  }
  const inbox = SignalInbox.open();
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
