/**
 * denit's init/copy mode: put denit and files into a shared volume (`denit init`, `denit copy`).
 *
 * @module
 */

import { copyMain } from "./src/copy_main.ts";
import { isCopyWorker } from "./src/worker_name.ts";

/** Runs `denit init …` or `denit copy …`; `args[0]` is the mode. Resolves to the exit code. */
export function main(args: readonly string[]): Promise<number> {
  return copyMain(args);
}

// The same module is the entry of copy mode's worker thread (new Worker(Deno.mainModule)),
// where import.meta.main is true as well: the worker check comes first.
if (isCopyWorker()) (await import("./src/copy_worker.ts")).serveCopyJobs();
else if (import.meta.main) Deno.exit(await main(Deno.args));
