/**
 * `denit job serve`: the job service's process, which denit (--jobs-socket) starts, starts again
 * when it dies, and stops at the end; not a command for people. It serves `denit.jobs.v1.Jobs`
 * (gRPC, @grpc/grpc-js) on the Unix socket that denit holds and hands it, listening, at
 * descriptor LISTEN_FD; at most MAX_CONNECTIONS connections at once, keeps
 * the job table in the spool directory of this run of denit, and moves the jobs' output there.
 * It never spawns, signals or reaps: it asks denit, over the control channel on descriptor
 * CONTROL_FD, which tells it what became of each job. It ends when denit does.
 */

import * as grpc from "@grpc/grpc-js";
import { createServer, type Socket } from "node:net";
import { type OptionSpec, scanArgs, Settings } from "../common/args.ts";
import { UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { CONTROL_FD, type FromJobHost, LISTEN_FD, type ToJobHost } from "../common/jobs.ts";
import { createLogger, LOG_LEVELS, type LogFormat, type Logger, printErr } from "../common/log.ts";
import { Channel } from "../sys/channel.ts";
import { jobsDefinition } from "./proto.ts";
import { Pump } from "./pump.ts";
import {
  type JobMessage,
  JobsError,
  JobService,
  type ListFields,
  type Outlet,
  type RunFields,
} from "./service.ts";
import { prepareTrustedDirectory } from "../common/job_paths.ts";

/** Connections at once; beyond them a new one is closed at once (clients retry). */
export const MAX_CONNECTIONS = 64;
/**
 * A connection that has sent nothing this long after it was accepted is closed: a gRPC client
 * sends HTTP/2's preface at once, and a silent one would hold one of the MAX_CONNECTIONS for
 * good (as would one its client closed at once, which this runtime at times never reports).
 */
export const SILENT_CONNECTION_MS = 5000;
/** Streams at once on one connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS). */
const STREAMS_PER_CONNECTION = 16;

const OPTIONS: readonly OptionSpec[] = [
  { key: "spool", names: ["--spool"], kind: "value" },
  { key: "parent", names: ["--parent"], kind: "value" },
  { key: "log-level", names: ["--log-level"], kind: "value" },
  { key: "log-format", names: ["--log-format"], kind: "value" },
];

const encoder = new TextEncoder();
const decoder = new TextDecoder();

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
 * Deno's node:http2 completes a write at once, whatever the peer's flow-control window, and
 * keeps what it cannot send yet: without this, a client slower than the spool would make the
 * service hold the whole output in memory. A stream therefore writes only while the peer's
 * connection window is open and the socket's queue is short.
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
    Promise.resolve().then(() => work(call.request, out)).then(
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

/** The directory of this run of denit in the spool: its pid and start time name it. */
function runDirectory(spool: string, parent: number): string {
  const stat = Deno.readTextFileSync(`/proc/${parent}/stat`);
  // proc(5): starttime is field 22; fields after the name start at field 3.
  const started = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19] ?? "0";
  return `${spool}/denit-${parent}-${started}`;
}

/**
 * Accepts connections on the socket denit gave (listening, at LISTEN_FD), at most
 * MAX_CONNECTIONS at once, and hands each to grpc-js (its connection injector): grpc-js alone
 * has no limit on connections. One that says nothing for SILENT_CONNECTION_MS is closed. A
 * connection that waited while no service ran is accepted now.
 */
async function listen(server: grpc.Server, log: Logger): Promise<void> {
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  let open = 0;
  let refused = 0;
  const listener = createServer((connection: Socket) => {
    if (open >= MAX_CONNECTIONS) {
      connection.destroy();
      if (refused++ % 1000 === 0) {
        log.warn(`${MAX_CONNECTIONS} connections are open: a new one was closed`, { refused });
      }
      return;
    }
    open++;
    const silent = setTimeout(() => {
      if (connection.bytesRead === 0) connection.destroy();
    }, SILENT_CONNECTION_MS);
    connection.once("close", () => {
      open--;
      clearTimeout(silent);
    });
    injector.injectConnection(connection);
  });
  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen({ fd: LISTEN_FD }, () => resolve());
  });
}

/** Runs the service; resolves to its exit code once denit is gone. */
export async function serveMain(args: readonly string[]): Promise<number> {
  let settings: Settings;
  try {
    settings = new Settings(scanArgs(args, OPTIONS, { stopAtPositional: false }), OPTIONS, {});
  } catch (err: unknown) {
    if (!(err instanceof UsageError)) throw err;
    printErr(`denit job serve: ${err.message} (denit starts this itself: see --jobs-socket)`);
    return ExitCode.USAGE;
  }
  const level = LOG_LEVELS.find((l) => l === settings.last("log-level")?.value) ?? "warn";
  const format: LogFormat = settings.last("log-format")?.value === "json" ? "json" : "text";
  const log = createLogger(level, Deno.pid, format, "denit-jobs");
  const channel = new Channel(CONTROL_FD);
  const send = (message: ToJobHost) => void channel.send(encoder.encode(JSON.stringify(message)));
  let service: JobService;
  try {
    const spool = settings.last("spool")?.value ?? "";
    const parent = Number(settings.last("parent")?.value ?? Deno.ppid);
    const dir = runDirectory(spool, parent);
    prepareTrustedDirectory(dir, "job spool:");
    const jobs = new JobService(new Pump(), dir, send);
    service = jobs;
    const server = new grpc.Server({ "grpc.max_concurrent_streams": STREAMS_PER_CONNECTION });
    server.addService(jobsDefinition(), {
      Run: unary((request: RunFields) => jobs.run(request)),
      Follow: streaming((request: IdRequest, out: Outlet<JobMessage>) =>
        jobs.follow(request.id, out)
      ),
      FollowIO: streaming((request: FollowIORequest, out) =>
        jobs.followIO(request.id, {
          stdout: request.readStdout,
          stderr: request.readStderr,
        }, out)
      ),
      Cancel: unary((request: CancelRequest) => jobs.cancel(request.id, request.graceMs)),
      List: unary((request: ListFields) => jobs.list(request)),
    });
    await listen(server, log);
    send({ type: "listening" });
  } catch (err: unknown) {
    const kind = err instanceof Error ? err.name : "Error";
    const text = err instanceof Error ? err.message : String(err);
    await channel.send(encoder.encode(JSON.stringify(
      { type: "failed", kind, message: text.split("\n")[0] ?? "" } satisfies ToJobHost,
    )));
    return 1;
  }
  for (;;) {
    const message = await channel.receive();
    if (message === null) break; // denit is gone: so is the service
    try {
      service.fromHost(JSON.parse(decoder.decode(message.data)) as FromJobHost, message.fds);
    } catch (err: unknown) {
      log.error("cannot take denit's message", { error: String(err) });
    }
  }
  return 0;
}
