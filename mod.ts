/**
 * denit: a tini-style PID 1 for containers. Runs one command, forwards signals to it, reaps
 * every zombie, stops what is left over, and exits with the child's status.
 *
 * @module
 */

import { main } from "./src/main.ts";

export { main };
export type { Config } from "./src/cli.ts";
export { ExitCode } from "./src/exit_codes.ts";

if (import.meta.main) Deno.exit(await main(Deno.args));
