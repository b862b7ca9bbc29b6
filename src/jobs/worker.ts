/**
 * The job service's thread: serves `denit.jobs.v1.Jobs` (gRPC, @grpc/grpc-js) on a Unix
 * socket, keeps the job table and copies the jobs' output into the spool. It never spawns,
 * signals or reaps: it asks the supervisor's thread, which tells it what became of each job.
 * Nothing here can delay the supervisor's signals.
 */

import * as grpc from "@grpc/grpc-js";
import type { FromJobHost, ToJobHost } from "../common/jobs.ts";
import { jobsDefinition } from "./proto.ts";
import { Pump } from "./pump.ts";
import { JobsError, JobService, type Outlet, type RunFields } from "./service.ts";
import { prepareSocketPath, prepareSpool } from "./paths.ts";

interface WorkerScope {
  onmessage: ((event: MessageEvent<FromJobHost>) => void) | null;
  postMessage(message: ToJobHost): void;
}

/** A refusal or an unexpected failure, as a gRPC status. */
function statusOf(err: unknown): Partial<grpc.StatusObject> {
  if (err instanceof JobsError) return { code: grpc.status[err.code], details: err.message };
  const message = err instanceof Error ? err.message : String(err);
  return { code: grpc.status.INTERNAL, details: message.split("\n")[0] ?? "" };
}

/** What the pacing reads of the HTTP/2 connection under a call. */
interface Transport {
  session?: {
    state?: { remoteWindowSize?: number };
    socket?: { writableLength?: number } | null;
  };
}

/**
 * The HTTP/2 stream under a grpc-js server call (grpc-js 1.14: the call's `call`, through any
 * `nextCall`, holds `stream`), or null if the library's shape changed.
 */
function transportOf(call: unknown): Transport | null {
  let at = (call as { call?: unknown }).call;
  for (let depth = 0; depth < 4 && at !== undefined && at !== null; depth++) {
    const node = at as { stream?: Transport; nextCall?: unknown };
    if (node.stream?.session !== undefined) return node.stream;
    at = node.nextCall;
  }
  return null;
}

/** Bytes the connection may hold unsent (in the socket's queue) before a stream waits. */
const SOCKET_QUEUE_LIMIT = 1024 * 1024;
/** How soon a stream that waits looks again; the wait doubles up to PACE_MAX_MS. */
const PACE_MS = 2;
const PACE_MAX_MS = 100;

/**
 * Deno 2.9.1's node:http2 completes a write at once, whatever the peer's flow-control window,
 * and keeps what it cannot send yet: without this, a client slower than the spool would make
 * the service hold the whole output in memory. A stream therefore writes only while the
 * peer's connection window is open and the socket's queue is short.
 */
function mayWrite(transport: Transport | null): boolean {
  const session = transport?.session;
  if (session === undefined) return true;
  const window = session.state?.remoteWindowSize ?? Infinity;
  const queued = session.socket?.writableLength ?? 0;
  return window > 0 && queued < SOCKET_QUEUE_LIMIT;
}

/** A server stream with back-pressure and a promise for the client's leaving. */
function outlet<T>(call: grpc.ServerWritableStream<unknown, T>): Outlet<T> {
  const left = Promise.withResolvers<void>();
  let gone = false;
  const leave = () => {
    gone = true;
    left.resolve();
  };
  call.on("cancelled", leave);
  call.on("close", leave);
  call.on("error", leave);
  let transport: Transport | null = null;
  return {
    get gone() {
      return gone || call.cancelled;
    },
    left: left.promise,
    async write(message: T): Promise<void> {
      if (gone || call.cancelled) return;
      if (!call.write(message)) {
        await Promise.race([
          new Promise<void>((resolve) => call.once("drain", () => resolve())),
          left.promise,
        ]);
      }
      transport ??= transportOf(call);
      // A reader that keeps up is waited for a few ms; one that stopped, at most 10 times a second.
      for (let wait = PACE_MS; !gone && !call.cancelled && !mayWrite(transport);) {
        await new Promise((resolve) => setTimeout(resolve, wait));
        wait = Math.min(wait * 2, PACE_MAX_MS);
      }
    },
  };
}

function unary<Req, Res>(
  work: (request: Req) => Promise<Res> | Res,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => work(call.request))
      .then((response) => callback(null, response), (err: unknown) => callback(statusOf(err)));
  };
}

function streaming<Req, Res>(
  work: (request: Req, out: Outlet<Res>) => Promise<void>,
): grpc.handleServerStreamingCall<Req, Res> {
  return (call) => {
    const out = outlet(call);
    work(call.request, out).then(
      () => call.end(),
      // grpc-js turns an "error" event into the call's status (destroy() would send none).
      (err: unknown) => call.emit("error", Object.assign(new Error(""), statusOf(err))),
    );
  };
}

interface IdRequest {
  id: string;
}
interface FollowIORequest extends IdRequest {
  readStdout: number;
  readStderr: number;
}
interface CancelRequest extends IdRequest {
  graceMs: number;
}

function bind(server: grpc.Server, socket: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.bindAsync(`unix:${socket}`, grpc.ServerCredentials.createInsecure(), (err) => {
      if (err === null) resolve();
      else reject(err);
    });
  });
}

/** Serves on this worker thread until the main thread terminates it. */
export function serveJobs(): void {
  const scope = globalThis as unknown as WorkerScope;
  let service: JobService | null = null;
  scope.onmessage = async (event) => {
    const message = event.data;
    if (message.type !== "start") {
      service?.fromHost(message);
      return;
    }
    try {
      prepareSpool(message.spool);
      await prepareSocketPath(message.socket);
      const jobs = new JobService(new Pump(), message.spool, (m) => scope.postMessage(m));
      service = jobs;
      const server = new grpc.Server();
      server.addService(jobsDefinition(), {
        Run: unary((request: RunFields) => jobs.run(request)),
        Follow: streaming((request: IdRequest, out) => jobs.follow(request.id, out)),
        FollowIO: streaming((request: FollowIORequest, out) =>
          jobs.followIO(request.id, {
            stdout: request.readStdout,
            stderr: request.readStderr,
          }, out)
        ),
        Cancel: unary((request: CancelRequest) => jobs.cancel(request.id, request.graceMs)),
        List: unary(() => ({ jobs: jobs.list() })),
      });
      await bind(server, message.socket);
      // Only its owner may connect (connect(2) needs write permission on the socket).
      await Deno.chmod(message.socket, 0o600);
      scope.postMessage({ type: "listening" });
    } catch (err: unknown) {
      const kind = err instanceof Error ? err.name : "Error";
      const text = err instanceof Error ? err.message : String(err);
      scope.postMessage({ type: "failed", kind, message: text.split("\n")[0] ?? "" });
    }
  };
  // Only now can a message be received: the main thread waits for this before sending one.
  scope.postMessage({ type: "ready" });
}
