/**
 * A job service under load, for `make bench`: CLIENTS gRPC clients (each on a connection of
 * its own), each running `head -c BYTES /dev/zero` as a job and reading its output with
 * FollowIO, again and again, at full speed, until SIGTERM. Waits for SOCKET to appear first;
 * prints "loaded" once every client finished a round, and at the end one JSON line: rounds,
 * bytes, and the clients that ended on an error (the service going away at the end).
 *
 * Usage: jobs_load.ts PROTO SOCKET CLIENTS BYTES
 */

// deno-lint-ignore no-import-prefix -- bench/run.ts runs with --no-config (no import map)
import * as grpc from "npm:@grpc/grpc-js@1.14.0";
// deno-lint-ignore no-import-prefix -- as above
import { loadSync } from "npm:@grpc/proto-loader@0.8.0";

const [proto = "", socket = "", clientsText = "50", bytesText = "1048576"] = Deno.args;
const clients = Number(clientsText);
const bytes = Number(bytesText);

type Callback<T> = (err: grpc.ServiceError | null, value?: T) => void;
interface JobsClient extends grpc.Client {
  Run(request: object, callback: Callback<{ id: string }>): grpc.ClientUnaryCall;
  FollowIO(request: object): grpc.ClientReadableStream<{ stdout: Uint8Array }>;
}

const Jobs = (grpc.loadPackageDefinition(
  loadSync(proto, { longs: Number, enums: String, defaults: true }),
) as unknown as {
  denit: {
    jobs: { v1: { Jobs: new (a: string, c: grpc.ChannelCredentials, o: object) => JobsClient } };
  };
}).denit.jobs.v1.Jobs;

const deadline = Date.now() + 20_000;
for (;;) {
  try {
    if ((await Deno.lstat(socket)).isSocket) break;
  } catch {
    // Not bound yet.
  }
  if (Date.now() > deadline) throw new Error(`${socket} never appeared`);
  await new Promise((resolve) => setTimeout(resolve, 10));
}

let stopping = false;
Deno.addSignalListener("SIGTERM", () => stopping = true);
let rounds = 0;
let received = 0;
let warm = 0;
let failed = 0;

async function client(index: number): Promise<void> {
  // A connection of its own: grpc-js would otherwise share one between all clients.
  const jobs = new Jobs(`unix:${socket}`, grpc.credentials.createInsecure(), {
    "grpc.use_local_subchannel_pool": 1,
  });
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
      if (round === 0 && ++warm === clients) {
        Deno.stdout.writeSync(new TextEncoder().encode("loaded\n"));
      }
    }
  } catch {
    // The service went away (the measured denit ended first): this client is done.
    failed++;
  } finally {
    jobs.close();
  }
}

await Promise.all(Array.from({ length: clients }, (_, i) => client(i)));
Deno.stdout.writeSync(
  new TextEncoder().encode(`${JSON.stringify({ rounds, bytes: received, failed })}\n`),
);
Deno.exit(0);
