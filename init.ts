/**
 * denit's init/copy mode on its own: put denit and files into a shared volume (`denit init`,
 * `denit copy`). mod.ts dispatches here too; this entry serves `deno run init.ts copy ...`.
 *
 * @module
 */

import { isCopyWorker } from "./src/copy/worker_name.ts";

/** Runs `denit init …` or `denit copy …`; `args[0]` is the mode. Resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  return await (await import("./src/copy/main.ts")).copyMain(args);
}

// The same module is the entry of copy mode's worker thread (new Worker(Deno.mainModule)),
// where import.meta.main is true as well: the worker check comes first.
if (isCopyWorker()) (await import("./src/copy/worker.ts")).serveCopyJobs();
else if (import.meta.main) Deno.exit(await main(Deno.args));
