/**
 * denit's init/copy mode: put denit and files into a shared volume (`denit init`, `denit copy`).
 *
 * @module
 */

import { ExitCode } from "./src/exit_codes.ts";
import { printErr } from "./src/log.ts";

/** Runs `denit init …` or `denit copy …`; `args[0]` is the mode. Resolves to the exit code. */
export function main(args: readonly string[]): Promise<number> {
  // TODO(#3): the copy engine.
  printErr(`denit ${args[0]}: not implemented yet`);
  return Promise.resolve(ExitCode.INTERNAL);
}

if (import.meta.main) Deno.exit(await main(Deno.args));
