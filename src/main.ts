/** denit's entry logic: parse, then supervise (or hand over to init/copy mode). */

import { HELP, parseInvocation, USAGE_LINE, UsageError } from "./cli.ts";
import { ExitCode } from "./exit_codes.ts";
import { createLogger, printErr, printOut } from "./log.ts";
import { VERSION } from "./version.ts";

/** Runs denit with the given arguments (without the program name); resolves to the exit code. */
export async function main(args: readonly string[]): Promise<number> {
  if (args[0] === "init" || args[0] === "copy") {
    // Loaded only here, so that supervising pays nothing for the copy code.
    const { main: initMain } = await import("../init.ts");
    return await initMain(args);
  }
  let invocation;
  try {
    invocation = parseInvocation(args, Deno.env.toObject());
  } catch (err: unknown) {
    if (!(err instanceof UsageError)) throw err;
    printErr(`denit: ${err.message}\n${USAGE_LINE}\nTry 'denit --help' for more information.`);
    return ExitCode.USAGE;
  }
  if (invocation.kind === "help") {
    printOut(HELP);
    return ExitCode.OK;
  }
  if (invocation.kind === "version") {
    printOut(`denit ${VERSION} (deno ${Deno.version.deno})`);
    return ExitCode.OK;
  }
  const config = invocation.config;
  const log = createLogger(config.logLevel);
  // Loaded after parsing, so that --help and usage errors never need the C library.
  const { supervise } = await import("./run.ts");
  return await supervise(config, log);
}
