/**
 * denit's init/copy mode on its own: put denit and files into a shared volume (`denit init`,
 * `denit copy`). mod.ts dispatches here too; this entry serves `deno run init.ts copy ...`.
 *
 * @module
 */

import { COPY_WORKER_NAME, workerName } from "./src/common/workers.ts";

/** Runs `denit init …` or `denit copy …`; `args[0]` is the mode. Resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  return await (await import("./src/copy/main.ts")).copyMain(args);
}

// The same module is the entry of copy mode's worker threads (new Worker(Deno.mainModule)),
// where import.meta.main is true as well: the worker's name comes first.
if (workerName() === COPY_WORKER_NAME) (await import("./src/copy/worker.ts")).serveCopyJobs();
else if (import.meta.main) Deno.exit(await main(Deno.args));
