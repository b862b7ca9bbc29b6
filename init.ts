/**
 * denit's init/copy mode: put denit and files into a shared volume (`denit init`, `denit copy`).
 *
 * @module
 */

import { copyMain } from "./src/copy_main.ts";

/** Runs `denit init …` or `denit copy …`; `args[0]` is the mode. Resolves to the exit code. */
export function main(args: readonly string[]): Promise<number> {
  return copyMain(args);
}

if (import.meta.main) Deno.exit(await main(Deno.args));
