/** Wires the supervisor to the process: the health endpoint, exec errors, exit codes. */

import type { Config, ListenAddress } from "./cli.ts";
import { ExecError } from "./command.ts";
import { Supervisor } from "./driver.ts";
import { ExitCode } from "./exit_codes.ts";
import type { Logger } from "./log.ts";

/** Something to close when denit exits. */
interface Closable {
  close(): void;
}

function formatAddress(address: ListenAddress): string {
  const host = address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname;
  return `${host}:${address.port}`;
}

function describe(err: unknown): string {
  if (err instanceof Deno.errors.AddrInUse) return "address already in use";
  if (err instanceof Deno.errors.AddrNotAvailable) return "address not available on this host";
  if (err instanceof Deno.errors.PermissionDenied) return "permission denied";
  if (!(err instanceof Error)) return String(err);
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : "";
  return `${err.message.split("\n")[0]}${cause}`;
}

async function startHealth(
  config: Config,
  supervisor: Supervisor,
  log: Logger,
): Promise<Closable | null> {
  if (config.health === null) return null;
  // Imported only here: without --health, denit loads no HTTP code at all.
  const { startHealth } = await import("./health.ts");
  const server = startHealth(config.health, {
    snapshot: () => supervisor.snapshot(),
    supervisorStartedAtMs: Date.now() - performance.now(),
  });
  log.info("health endpoint listening", { address: formatAddress(config.health) });
  return server;
}

/** Supervises `config.command`; resolves to denit's exit code. */
export async function supervise(config: Config, log: Logger): Promise<number> {
  const supervisor = new Supervisor(config, log);
  let health: Closable | null;
  try {
    // Bound before the child starts: a taken address must fail before anything runs.
    health = await startHealth(config, supervisor, log);
  } catch (err: unknown) {
    const address = config.health === null ? "" : formatAddress(config.health);
    log.error(`Cannot serve health on "${address}": ${describe(err)}`);
    return ExitCode.INTERNAL;
  }
  try {
    // Deno refuses arguments that are not valid UTF-8 before denit runs, so every argument
    // here is exact text, and its UTF-8 encoding is the exact bytes it came in as.
    const encoder = new TextEncoder();
    supervisor.start(config.command.map((arg) => encoder.encode(arg)));
  } catch (err: unknown) {
    health?.close();
    if (err instanceof ExecError) {
      log.error(err.message);
      return err.exitCode;
    }
    log.error(`Cannot start the supervisor: ${describe(err)}`);
    return ExitCode.INTERNAL;
  }
  const exitCode = await supervisor.finished();
  health?.close();
  return exitCode;
}
