/**
 * `denit bridge [SOCKET]`: joins this process's stdin and stdout to a Unix socket, so that
 * `docker exec -i C /denit bridge` or `kubectl exec -i POD -- /denit bridge` carries a gRPC
 * connection into a container that has no shell. Each direction is copied until it ends, then
 * half-closed; the bridge exits when both are done.
 */

import { ExitCode } from "../common/exit_codes.ts";
import { printErr, printOut } from "../common/log.ts";
import { DEFAULT_JOBS_SOCKET } from "../common/job_paths.ts";

const USAGE = "Usage: denit bridge [SOCKET]";

/** `denit bridge --help`. */
export const BRIDGE_HELP = `${USAGE}

Copies stdin to the job service's socket (default ${DEFAULT_JOBS_SOCKET}, or
DENIT_JOBS_SOCKET) and the socket to stdout, half-closing each side at its end, and
exits when both directions are done: 0, or 125 if the socket cannot be reached.`;

const CHUNK = 64 * 1024;

async function copy(
  from: { read(p: Uint8Array): Promise<number | null> },
  to: { write(p: Uint8Array): Promise<number> },
): Promise<void> {
  const buffer = new Uint8Array(CHUNK);
  for (;;) {
    const n = await from.read(buffer);
    if (n === null) return;
    let done = 0;
    while (done < n) done += await to.write(buffer.subarray(done, n));
  }
}

/** Runs `denit bridge ARGS`; resolves to the exit code. */
export async function bridgeMain(args: readonly string[]): Promise<number> {
  if (args[0] === "-h" || args[0] === "--help") {
    printOut(BRIDGE_HELP);
    return ExitCode.OK;
  }
  if (args.length > 1 || (args[0] ?? "").startsWith("-")) {
    printErr(`denit bridge: one socket path at most\n${USAGE}`);
    return ExitCode.USAGE;
  }
  const path = args[0] ?? (Deno.env.get("DENIT_JOBS_SOCKET") || DEFAULT_JOBS_SOCKET);
  let conn: Deno.UnixConn;
  try {
    conn = await Deno.connect({ transport: "unix", path });
  } catch (err: unknown) {
    const reason = err instanceof Error ? err.message.split("\n")[0] : String(err);
    printErr(`denit bridge: cannot connect to "${path}": ${reason}`);
    return ExitCode.INTERNAL;
  }
  const upstream = copy(Deno.stdin, conn).finally(() => conn.closeWrite().catch(() => {}));
  const downstream = copy(conn, Deno.stdout);
  const results = await Promise.allSettled([upstream, downstream]);
  conn.close();
  const failed = results.find((r) => r.status === "rejected");
  if (failed === undefined) return ExitCode.OK;
  const reason = (failed as PromiseRejectedResult).reason;
  // The other side going away mid-copy is how a bridge usually ends: not an error.
  if (reason instanceof Deno.errors.BrokenPipe || reason instanceof Deno.errors.ConnectionReset) {
    return ExitCode.OK;
  }
  printErr(`denit bridge: ${reason instanceof Error ? reason.message : String(reason)}`);
  return ExitCode.INTERNAL;
}
