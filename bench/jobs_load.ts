/**
 * A job service under load, for `make bench`: CLIENTS gRPC clients (each on a connection of
 * its own), each running `head -c BYTES /dev/zero` as a job and reading its output with
 * FollowIO, again and again, at full speed, until SIGTERM. Waits for SOCKET to appear first;
 * prints "loaded" once every client finished a round (or failed, said on stderr), and at the
 * end one JSON line: rounds, bytes, and the clients that ended on an error.
 *
 * Usage: jobs_load.ts PROTO SOCKET CLIENTS BYTES
 */

import { jobsClient, waitForSocket } from "./jobs.ts";

const [proto = "", socket = "", clientsText = "50", bytesText = "1048576"] = Deno.args;
const clients = Number(clientsText);
const bytes = Number(bytesText);

await waitForSocket(socket);

let stopping = false;
Deno.addSignalListener("SIGTERM", () => stopping = true);
let rounds = 0;
let received = 0;
let warm = 0;
let failed = 0;

/** A client finished its first round, or failed: once all have, the load is on. */
function settled(): void {
  if (++warm === clients) Deno.stdout.writeSync(new TextEncoder().encode("loaded\n"));
}

async function client(index: number): Promise<void> {
  // A connection of its own: grpc-js would otherwise share one between all clients.
  const jobs = jobsClient(proto, socket, { "grpc.use_local_subchannel_pool": 1 });
  try {
    for (let round = 0; !stopping; round++) {
      const id = `load-${Deno.pid}-${index}-${round}`;
      await new Promise<void>((resolve, reject) =>
        jobs.Run(
          { id, argv: ["head", "-c", String(bytes), "/dev/zero"] },
          (err) => err === null ? resolve() : reject(err),
        )
      );
      await new Promise<void>((resolve, reject) => {
        const stream = jobs.FollowIO({ id });
        stream.on("data", (m: { stdout: Uint8Array }) => received += m.stdout.length);
        stream.on("error", reject);
        stream.on("end", resolve);
      });
      rounds++;
      if (round === 0) settled();
    }
  } catch (err: unknown) {
    // The service went away (the measured denit ended first) or refused: this client is done,
    // and says why once. It counts as settled: "loaded" never waits for a client that failed.
    // deno-lint-ignore no-console -- the one line that says why the load is smaller
    if (failed++ === 0) console.error(`jobs_load: a client failed: ${err}`);
    if (!stopping) settled();
  } finally {
    jobs.close();
  }
}

await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
Deno.stdout.writeSync(
  new TextEncoder().encode(`${JSON.stringify({ rounds, bytes: received, failed })}\n`),
);
Deno.exit(0);
