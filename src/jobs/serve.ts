/**
 * `denit job serve`: gRPC on the socket denit hands it, at most MAX_CONNECTIONS. GOAWAY frames
 * are dropped: nghttp2 in Deno's node:http2 can abort on one (denoland/deno#36788).
 */

import * as grpc from "@grpc/grpc-js";
import { createServer, type Socket } from "node:net";
import { Duplex } from "node:stream";
import { option, type OptionSpec, scanArgs, Settings } from "../common/args.ts";
import { errorLine, UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { prepareTrustedDirectory } from "./contract.ts";
import { createLogger, LOG_LEVELS, type LogFormat, type Logger, printErr } from "../common/log.ts";
import { launcherPath } from "../common/paths.ts";
import { connectionWaiting } from "../sys/listener.ts";
import { startSignalThread } from "../sys/signals.ts";
import { fileLimit } from "../sys/process.ts";
import { jobsDefinition, quietGrpc } from "./proto.ts";
import { JobsError, JobService, MAX_REQUEST_BYTES } from "./service.ts";
import type { JobMessage, ListFields, Outlet, RunFields } from "./service.ts";

/** Connections at once; beyond them a new one is closed at once (clients retry). */
export const MAX_CONNECTIONS = 64;
/** accept(2) failing (EMFILE) stops the runtime's accept loop silently: checked this often. */
const ACCEPT_CHECK_MS = 2000;
/** A connection that sent no preface and first frame this long after its accept is closed. */
export const SILENT_CONNECTION_MS = 5000;
/** Streams at once on one connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS). */
const STREAMS_PER_CONNECTION = 16;

const OPTIONS: readonly OptionSpec[] =
  "--run-dir --listen-fd --oom-count --nofile --log-level --log-format"
    .split(" ").map((name) => option(name, "value"));

/** HTTP/2's connection preface (RFC 9113 §3.4), then frames of a 9-byte head (§4.1). */
const PREFACE_BYTES = 24;
const FRAME_HEAD_BYTES = 9;
const GOAWAY = 0x7;

/** A client's bytes without its GOAWAY frames, and whether its preface and a frame came. */
class GoawayFilter {
  #skipPreface = PREFACE_BYTES;
  /** A frame head split between two reads. */
  #head = new Uint8Array(0);
  /** Bytes of the current frame still to pass on (or to drop, when `#dropping`). */
  #rest = 0;
  #dropping = false;
  spoke = false;

  /** The parts of `chunk` to pass on. */
  filter(chunk: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = [];
    let at = 0;
    if (this.#skipPreface > 0) {
      const n = Math.min(this.#skipPreface, chunk.length);
      out.push(chunk.subarray(0, n));
      this.#skipPreface -= n;
      at = n;
    }
    while (at < chunk.length) {
      if (this.#rest > 0) {
        const n = Math.min(this.#rest, chunk.length - at);
        if (!this.#dropping) out.push(chunk.subarray(at, at + n));
        this.#rest -= n;
        at += n;
        continue;
      }
      const need = FRAME_HEAD_BYTES - this.#head.length;
      const head = new Uint8Array(this.#head.length + Math.min(need, chunk.length - at));
      head.set(this.#head);
      head.set(chunk.subarray(at, at + head.length - this.#head.length), this.#head.length);
      at += head.length - this.#head.length;
      this.#head = head;
      if (head.length < FRAME_HEAD_BYTES) break;
      this.#head = new Uint8Array(0);
      this.#rest = ((head[0] ?? 0) << 16) | ((head[1] ?? 0) << 8) | (head[2] ?? 0);
      this.#dropping = head[3] === GOAWAY;
      this.spoke = true;
      if (!this.#dropping) out.push(head);
    }
    return out;
  }
}

/** The connection as grpc-js gets it: the socket's bytes through a GoawayFilter. */
function filtered(socket: Socket, filter: GoawayFilter): Duplex {
  const duplex: Duplex = new Duplex({
    read: () => socket.resume(),
    write: (chunk, _encoding, done) => socket.write(chunk, done),
    final: (done) => socket.end(done),
    destroy: (err, done) => {
      socket.destroy();
      done(err);
    },
  });
  socket.on("data", (chunk: Uint8Array) => {
    for (const part of filter.filter(chunk)) if (!duplex.push(part)) socket.pause();
  });
  socket.on("end", () => duplex.push(null));
  socket.on("close", () => duplex.destroy());
  socket.on("error", (err) => duplex.destroy(err));
  return duplex;
}

/** A refusal or an unexpected failure, as a gRPC status. */
function statusOf(err: unknown): Partial<grpc.StatusObject> {
  if (err instanceof JobsError) return { code: grpc.status[err.code], details: err.message };
  return { code: grpc.status.INTERNAL, details: errorLine(err) };
}

/** What the pacing reads of the HTTP/2 connection under a call. */
interface Transport {
  session?: {
    state?: { remoteWindowSize?: number };
    socket?: { writableLength?: number } | null;
  };
}

/** The HTTP/2 stream under a grpc-js 1.14 server call (`call`, through `nextCall`), or null. */
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
 * Deno's node:http2 keeps what it cannot send: a stream writes only while the peer's window is
 * open and the socket's queue short, or a slow client would make the service hold all output.
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

/** Resolves when a connection waited at two checks in a row and none was accepted between. */
function acceptStops(fd: number, accepted: () => number): Promise<void> {
  return new Promise((resolve) => {
    let seen: number | null = null; // the accepted count when a connection was last seen waiting
    const timer = setInterval(async () => {
      const waiting = await connectionWaiting(fd);
      const count = accepted();
      if (waiting && seen === count) {
        clearInterval(timer);
        resolve();
      }
      seen = waiting ? count : null;
    }, ACCEPT_CHECK_MS);
  });
}

/** Accepts at `fd`, at most MAX_CONNECTIONS (grpc-js has no limit); resolves if accepting stops. */
async function listen(
  server: grpc.Server,
  fd: number,
  log: Logger,
): Promise<{ stopped: Promise<void> }> {
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  let accepted = 0;
  let open = 0;
  let refused = 0;
  const listener = createServer((connection: Socket) => {
    accepted++;
    if (open >= MAX_CONNECTIONS) {
      connection.destroy();
      if (refused++ % 1000 === 0) {
        log.warn(`${MAX_CONNECTIONS} connections are open: a new one was closed`, { refused });
      }
      return;
    }
    open++;
    const filter = new GoawayFilter();
    const silent = setTimeout(() => {
      if (!filter.spoke) connection.destroy();
    }, SILENT_CONNECTION_MS);
    connection.once("close", () => {
      open--;
      clearTimeout(silent);
    });
    injector.injectConnection(filtered(connection, filter));
  });
  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject);
    listener.listen({ fd }, () => resolve());
  });
  return { stopped: acceptStops(fd, () => accepted) };
}

/** Runs the service; resolves to its exit code (it runs until denit ends it). */
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
  quietGrpc((line) => log.error(`grpc-js: ${line}`));
  startSignalThread();
  let stopped: Promise<void>;
  try {
    const dir = settings.last("run-dir")?.value ?? "";
    prepareTrustedDirectory(dir, "job spool:");
    const oomCount = settings.last("oom-count")?.value ?? null;
    const limit = Number(settings.last("nofile")?.value ?? NaN);
    const fileLimit = Number.isInteger(limit) && limit > 0 ? limit : null;
    const jobs = new JobService(dir, { keeper: launcherPath(), oomCount, fileLimit });
    void jobs.watch();
    const server = new grpc.Server({
      "grpc.max_concurrent_streams": STREAMS_PER_CONNECTION,
      "grpc.max_receive_message_length": MAX_REQUEST_BYTES,
    });
    server.addService(jobsDefinition(), {
      Run: unary((request: RunFields) => jobs.run(request)),
      Follow: streaming(({ id }: { id: string }, out: Outlet<JobMessage>) => jobs.follow(id, out)),
      FollowIO: streaming(
        (request: { id: string; readStdout: number; readStderr: number }, out) => {
          const { id, readStdout: stdout, readStderr: stderr } = request;
          return jobs.followIO(id, { stdout, stderr }, out);
        },
      ),
      Cancel: unary(({ id, graceMs }: { id: string; graceMs: number }) => jobs.cancel(id, graceMs)),
      List: unary((request: ListFields) => jobs.list(request)),
    });
    const fd = Number(settings.last("listen-fd")?.value ?? 3);
    ({ stopped } = await listen(server, fd, log));
    log.info("listening", { spool: dir });
  } catch (err: unknown) {
    log.error(`cannot serve jobs: ${errorLine(err)}`);
    await log.flush();
    return ExitCode.INTERNAL;
  }
  // It serves until denit ends it (SIGTERM, or the launcher's parent-death signal), or until
  // it cannot accept: then denit starts it again, with the connections that wait.
  await stopped;
  const why = "the job service stopped accepting connections (at its open-file limit?)";
  log.error(`${why}; exiting, to be started again`, {
    openFileLimit: fileLimit().soft ?? "unlimited",
  });
  await log.flush();
  return ExitCode.INTERNAL;
}
