/** Wires the supervisor to the process: raw arguments, exec errors, exit codes. */

import type { Config } from "./cli.ts";
import { ExecError } from "./command.ts";
import { Supervisor } from "./driver.ts";
import { ExitCode } from "./exit_codes.ts";
import type { Logger } from "./log.ts";

/** Supervises `config.command`; resolves to denit's exit code. */
export async function supervise(config: Config, log: Logger): Promise<number> {
  const supervisor = new Supervisor(config, log);
  try {
    // Deno refuses arguments that are not valid UTF-8 before denit runs, so every argument
    // here is exact text, and its UTF-8 encoding is the exact bytes it came in as.
    const encoder = new TextEncoder();
    supervisor.start(config.command.map((arg) => encoder.encode(arg)));
  } catch (err: unknown) {
    if (err instanceof ExecError) {
      log.error(err.message);
      return err.exitCode;
    }
    log.error(`cannot start the supervisor: ${describe(err)}`);
    return ExitCode.INTERNAL;
  }
  return await supervisor.finished();
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return `${err.message}${cause}`;
}
