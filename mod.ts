/**
 * denit: a tini-style PID 1 for containers. Runs one command, forwards signals to it, reaps
 * every zombie, stops what is left over, and exits with the child's status.
 *
 * @module
 */

import { main } from "./src/main.ts";
import { isCopyWorker } from "./src/worker_name.ts";

export { main };
export type { Config } from "./src/cli.ts";
export { ExitCode } from "./src/exit_codes.ts";

// The same module is the entry of copy mode's worker thread (new Worker(Deno.mainModule)),
// where import.meta.main is true as well: the worker check comes first.
if (isCopyWorker()) (await import("./src/copy_worker.ts")).serveCopyJobs();
else if (import.meta.main) Deno.exit(await main(Deno.args));
