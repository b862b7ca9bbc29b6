/**
 * A real gRPC client of denit's job service for the tests: @grpc/grpc-js with the contract
 * loaded from proto/ by @grpc/proto-loader, independently of denit's own copy of it.
 */

import * as grpc from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { denitArgv, denitPid, hostPid, type Mode, ROOT, Running } from "./helpers.ts";

export const PROTO_PATH = `${ROOT}proto/denit/jobs/v1/jobs.proto`;

export interface Job {
  id: string;
  status: string;
  argv: string[];
  pid: number;
  exitCode: number;
  signal: string;
  startedAtMs: number;
  finishedAtMs: number;
  stdoutBytes: number;
  stderrBytes: number;
  outputTruncated: boolean;
}
export interface Output {
  stdout: Uint8Array;
  stderr: Uint8Array;
  stdoutOffset: number;
  stderrOffset: number;
  truncated: boolean;
}
export type Callback<T> = (err: grpc.ServiceError | null, value?: T) => void;
export interface JobsClient extends grpc.Client {
  Run(request: object, callback: Callback<Job>): grpc.ClientUnaryCall;
  Cancel(request: object, callback: Callback<Job>): grpc.ClientUnaryCall;
  List(
    request: object,
    callback: Callback<{ jobs: Job[]; nextAfterId: string }>,
  ): grpc.ClientUnaryCall;
  Follow(request: object): grpc.ClientReadableStream<Job>;
  FollowIO(request: object, options?: grpc.CallOptions): grpc.ClientReadableStream<Output>;
}
export type JobsConstructor = new (
  address: string,
  credentials: grpc.ChannelCredentials,
) => JobsClient;

const definition = loadSync(PROTO_PATH, {
  longs: Number,
  enums: String,
  defaults: true,
});
const loaded = grpc.loadPackageDefinition(definition) as unknown as {
  denit: { jobs: { v1: { Jobs: JobsConstructor } } };
};

/** Every call of a test client ends within this long: a hung call fails, it does not hang. */
export const CALL_DEADLINE_MS = 30_000;

export function client(socket: string, options: grpc.ClientOptions = {}): JobsClient {
  const Jobs = loaded.denit.jobs.v1.Jobs as unknown as new (
    address: string,
    credentials: grpc.ChannelCredentials,
    options: grpc.ClientOptions,
  ) => JobsClient;
  return new Jobs(`unix:${socket}`, grpc.credentials.createInsecure(), {
    ...options,
    callInvocationTransformer: (props) => {
      props.callOptions.deadline ??= Date.now() + CALL_DEADLINE_MS;
      return props;
    },
  });
}

export function call<T>(start: (callback: Callback<T>) => unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    start((err, value) => err === null && value !== undefined ? resolve(value) : reject(err));
  });
}

export async function rejection(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    await promise;
  } catch (err: unknown) {
    return err as grpc.ServiceError;
  }
  throw new Error("the call succeeded; a refusal was expected");
}

/** Every message of a server stream, until it ends (rejects with its error). */
export function collect<T>(stream: grpc.ClientReadableStream<T>): Promise<T[]> {
  return new Promise((resolve, reject) => {
    const all: T[] = [];
    stream.on("data", (message: T) => all.push(message));
    stream.on("error", reject);
    stream.on("end", () => resolve(all));
  });
}

export const decoder = new TextDecoder();

/** The job's whole stdout and stderr from FollowIO, as text. */
export async function output(c: JobsClient, id: string): Promise<{ out: string; err: string }> {
  const messages = await collect(c.FollowIO({ id, readStdout: 0, readStderr: 0 }));
  const join = (key: "stdout" | "stderr") =>
    decoder.decode(concat(messages.map((m) => m[key] ?? new Uint8Array())));
  return { out: join("stdout"), err: join("stderr") };
}

export function concat(parts: readonly Uint8Array[]): Uint8Array {
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    all.set(part, at);
    at += part.length;
  }
  return all;
}

/** The last status Follow sends: the job once it has finished. */
export async function finished(c: JobsClient, id: string): Promise<Job> {
  const all = await collect(c.Follow({ id }));
  const last = all.at(-1);
  if (last === undefined) throw new Error(`Follow(${id}) sent nothing`);
  return last;
}

export async function sha256(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Resolves once the job's stdout so far matches `pattern` (the stream is then dropped). */
export function outputMatches(c: JobsClient, id: string, pattern: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const stream = c.FollowIO({ id, readStdout: 0, readStderr: 0 });
    let text = "";
    stream.on("data", (m: Output) => {
      text += decoder.decode(m.stdout);
      if (!pattern.test(text)) return;
      stream.cancel();
      resolve(text);
    });
    stream.on("error", (err: grpc.ServiceError) => {
      if (err.code !== grpc.status.CANCELLED) reject(err);
    });
    stream.on("end", () => reject(new Error(`${id}'s output ended without ${pattern}: ${text}`)));
  });
}

/** denit with the job service and a main child that waits; stopped and checked at the end. */
export class Service {
  readonly dir = Deno.makeTempDirSync({ prefix: "denit-jobs-" });
  readonly socket = `${this.dir}/run/jobs.sock`;
  readonly spool = `${this.dir}/spool`;
  readonly proc: Running;
  readonly mode: Mode;
  #client: JobsClient | null = null;

  /** `wrapper` runs denit (it ends by exec'ing its arguments). */
  constructor(
    mode: Mode,
    extra: readonly string[] = [],
    child: readonly string[] = [],
    wrapper: readonly string[] = [],
  ) {
    this.mode = mode;
    // Longer than any test: the main child's end would stop denit and the service.
    const main = child.length > 0 ? child : ["sh", "-c", "echo up; exec sleep 900"];
    this.proc = new Running([
      ...wrapper,
      ...denitArgv(mode, [
        "--jobs-socket",
        this.socket,
        "--jobs-spool",
        this.spool,
        ...extra,
        "--",
        ...main,
      ]),
    ]);
  }

  /**
   * The main child runs and the service answers: denit starts the service at the first
   * connection, which this List call makes.
   */
  async ready(): Promise<this> {
    await this.proc.waitFor(/^up$/);
    // A connection of its own, closed after (a shared one would stay open for seconds).
    const first = client(this.socket, { "grpc.use_local_subchannel_pool": 1 });
    await call((cb) => first.List({}, cb));
    first.close();
    return this;
  }

  get client(): JobsClient {
    this.#client ??= client(this.socket);
    return this.#client;
  }

  get pid(): number {
    return denitPid(this.proc, this.mode);
  }

  /** A pid as the job service reports it (inside the namespace) → the host's. */
  host(innerPid: number): number {
    return this.mode === "pid1" ? hostPid(this.pid, innerPid) : innerPid;
  }

  async stop(): Promise<{ code: number; stderr: string }> {
    this.#client?.close();
    try {
      Deno.kill(this.pid, "SIGTERM");
    } catch {
      // denit ended already: its status is still read below.
    }
    const status = await this.proc.status();
    Deno.removeSync(this.dir, { recursive: true });
    return status;
  }
}

export function childrenOf(pid: number): number[] {
  const all: number[] = [];
  for (const task of Deno.readDirSync(`/proc/${pid}/task`)) {
    try {
      const text = Deno.readTextFileSync(`/proc/${pid}/task/${task.name}/children`).trim();
      if (text !== "") all.push(...text.split(" ").map(Number));
    } catch {
      // The thread ended while we looked.
    }
  }
  return all;
}

export function cmdline(pid: number): string[] {
  try {
    return Deno.readTextFileSync(`/proc/${pid}/cmdline`).split("\0");
  } catch {
    return [];
  }
}

/** The job service's host pid: denit's child that runs `job serve` (0 while there is none). */
export function servicePidOf(denit: number): number {
  return childrenOf(denit).find((pid) => {
    const words = cmdline(pid);
    const at = words.indexOf("job");
    return at >= 0 && words[at + 1] === "serve";
  }) ?? 0;
}
