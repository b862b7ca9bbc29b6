/** `denit job`: the service's client; `follow` and `logs -f` resume after a dropped connection. */

import * as grpc from "@grpc/grpc-js";
import { option, type OptionSpec, parseFrom, scanArgs, Settings } from "../common/args.ts";
import { formatDuration, parseDuration } from "../common/duration.ts";
import { UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { escapeControls, printErr, printOut, printUsageError } from "../common/log.ts";
import { parseSignal, signalNumber } from "../common/signals.ts";
import { DEFAULT_CANCEL_GRACE_MS, DEFAULT_JOBS_SOCKET } from "./contract.ts";
import { jobsDefinition } from "./proto.ts";
import type { JobMessage, OutputMessage } from "./service.ts";

const DEFAULT_WAIT_MS = 30_000;
const SIGPIPE = signalNumber("SIGPIPE");
/** After this long without an answer, denit job says that it waits. */
const NOTICE_AFTER_MS = 2000;

const USAGE = "Usage: denit job run|follow|logs|cancel|list [--socket PATH] ...";

export const JOB_HELP = `${USAGE}

Talks to the job service of a denit started with --jobs-socket (gRPC on a Unix socket).

  denit job run [--id ID] [--workdir DIR] [--env KEY=VALUE]... [-f] -- COMMAND [ARGS...]
      start COMMAND as a job (its own process group, no shell); prints the job;
      exit 127 (not found) or 126 when COMMAND cannot be run.
      Runs nothing if a job with this ID exists. -f: print its output, then exit
      with its exit code (128+N for signal N).
  denit job follow ID      print the job's status at each change until it ends; exit
                           with its exit code
  denit job logs [-f] ID   print the job's stdout and stderr (to stdout and stderr); -f:
                           until its output ends, reconnecting where it left off
  denit job cancel [--grace DURATION] ID
                           TERM to every process of the job, KILL after DURATION
                           (default 10s); returns once every one is gone
  denit job list           every job: id, status, exit code, pid, start, end, command

Options:
      --socket PATH  the service's socket (default ${DEFAULT_JOBS_SOCKET})   DENIT_JOBS_SOCKET=PATH
      --wait DURATION  how long to wait for the service to answer, or to come back
                     when a stream breaks (default 30s); says so after 2s   DENIT_JOB_WAIT=DURATION

Exit status: 0, or the job's own with -f/follow; 1 the service refused (unknown id,
bad argument); 2 usage error; 125 the service cannot be reached, or did not answer
within --wait; 141 its output was closed (| head), as SIGPIPE ends a program.`;

const OPTIONS: readonly OptionSpec[] = [
  option("--socket", "value", "DENIT_JOBS_SOCKET"),
  option("--wait", "value", "DENIT_JOB_WAIT"),
  ...["--id", "-w --workdir", "-e --env", "--grace"].map((names) => option(names, "value")),
  ...["-f --follow", "-h --help"].map((names) => option(names, "flag")),
];

/** The answers of the unary calls. */
type Answers = {
  Run: JobMessage;
  Cancel: JobMessage;
  List: { jobs: JobMessage[]; nextAfterId: string };
};
type Unary<T> = (request: object, options: grpc.CallOptions, done: grpc.requestCallback<T>) => void;

type UnaryCalls = { [M in keyof Answers]: Unary<Answers[M]> };
type JobsClient = grpc.Client & UnaryCalls & {
  Follow(request: object): grpc.ClientReadableStream<JobMessage>;
  FollowIO(request: object): grpc.ClientReadableStream<OutputMessage>;
};

/** The service refused, or could not be reached: the message, and denit job's exit code. */
class CallFailed extends Error {
  constructor(message: string, readonly exitCode: number) {
    super(message);
  }
}

function failure(err: grpc.ServiceError, socket: string): CallFailed {
  // grpc-js says "No connection established. Last error: ... connect ENOENT PATH": one line
  // that says what to do instead.
  const connect = /connect (E[A-Z]+)/.exec(err.details ?? "")?.[1];
  if (err.code === grpc.status.UNAVAILABLE && connect !== undefined) {
    return new CallFailed(
      `no job service answers at "${socket}" (${connect}): it is the --jobs-socket of a ` +
        `running denit; give its path with --socket or DENIT_JOBS_SOCKET (from another ` +
        `container: through denit bridge)`,
      ExitCode.INTERNAL,
    );
  }
  const unreachable = err.code === grpc.status.UNAVAILABLE ||
    err.code === grpc.status.DEADLINE_EXCEEDED;
  return new CallFailed(
    `${grpc.status[err.code] ?? err.code}: ${err.details || err.message}`,
    unreachable ? ExitCode.INTERNAL : ExitCode.FAILED,
  );
}

/** The job service at a socket: one connection, every call bounded by --wait. */
class Service {
  #client: JobsClient | null = null;
  #said = false;

  constructor(readonly socket: string, readonly waitMs: number) {}

  get client(): JobsClient {
    if (this.#client === null) {
      const Client = grpc.makeGenericClientConstructor(jobsDefinition(), "Jobs");
      const credentials = grpc.credentials.createInsecure();
      this.#client = new Client(`unix:${this.socket}`, credentials) as unknown as JobsClient;
    }
    return this.#client;
  }

  close(): void {
    this.#client?.close();
  }

  /** Says once, on stderr, that denit job waits for the service. */
  waiting(what: string): void {
    if (this.#said) return;
    this.#said = true;
    printErr(
      escapeControls(`denit job: ${what}; waiting up to ${formatDuration(this.waitMs)} (--wait)`),
    );
  }

  /** One call, given up --wait (plus `workMs`, what the call itself may take) after it was made. */
  unary<M extends keyof Answers>(method: M, request: object, workMs = 0): Promise<Answers[M]> {
    const notice = setTimeout(
      () => this.waiting(`no answer yet from the job service at ${this.socket}`),
      NOTICE_AFTER_MS,
    );
    const limitMs = this.waitMs + workMs;
    const calls: UnaryCalls = this.client;
    const call: Unary<Answers[M]> = calls[method];
    return new Promise<Answers[M]>((resolve, reject) => {
      call.call(this.client, request, { deadline: Date.now() + limitMs }, (err, value) => {
        if (err?.code === grpc.status.DEADLINE_EXCEEDED) {
          const within = formatDuration(limitMs);
          const text = `the job service at ${this.socket} did not answer within ${within}`;
          reject(new CallFailed(text, ExitCode.INTERNAL));
        } else if (err !== null) reject(failure(err, this.socket));
        else if (value === undefined) reject(new CallFailed("empty answer", ExitCode.INTERNAL));
        else resolve(value);
      });
    }).finally(() => clearTimeout(notice));
  }

  /** A stream, opened again (from its own resume point) while the service is unreachable. */
  async stream<T>(
    open: () => grpc.ClientReadableStream<T>,
    onMessage: (message: T) => Promise<void>,
  ): Promise<void> {
    let lostAt: number | null = null;
    for (;;) {
      const err = await new Promise<grpc.ServiceError | null>((resolve, reject) => {
        const stream = open();
        let chain = Promise.resolve();
        stream.on("data", (message: T) => {
          lostAt = null;
          stream.pause();
          chain = chain.then(() => onMessage(message)).then(() => void stream.resume(), (e) => {
            stream.cancel();
            reject(e); // `onMessage` failed (its output closed): the stream ends with it
          });
        });
        stream.on("error", (e: grpc.ServiceError) => void chain.then(() => resolve(e)));
        stream.on("end", () => void chain.then(() => resolve(null)));
      });
      if (err === null) return;
      lostAt ??= performance.now();
      if (err.code !== grpc.status.UNAVAILABLE || performance.now() - lostAt > this.waitMs) {
        throw failure(err, this.socket);
      }
      this.waiting(`the job service at ${this.socket} cannot be reached`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  /** Every job, a page of List at a time (a page stays well under gRPC's message limit). */
  async *list(ids: readonly string[] = []): AsyncGenerator<JobMessage> {
    for (let afterId = "";;) {
      const page = await this.unary("List", { ids, afterId });
      yield* page.jobs;
      if (page.nextAfterId === "") return;
      afterId = page.nextAfterId;
    }
  }
}

async function writeAll(target: typeof Deno.stdout, bytes: Uint8Array): Promise<void> {
  for (let done = 0; done < bytes.length;) done += await target.write(bytes.subarray(done));
}

function jobCode(job: JobMessage): number {
  if (job.signal === "") return job.exitCode;
  try {
    return ExitCode.SIGNAL_BASE + parseSignal(job.signal);
  } catch {
    return ExitCode.SIGNAL_BASE; // a signal without a name here: still "killed by a signal"
  }
}

function describeJob(job: JobMessage): string {
  const end = job.status === "RUNNING"
    ? ""
    : job.signal !== ""
    ? ` signal=${job.signal}`
    : ` exit=${job.exitCode}`;
  const cause = job.cause === "" ? "" : ` cause=${job.cause}`;
  return `${job.id} ${job.status.toLowerCase()} pid=${job.pid}${end}${cause}`;
}

function time(ms: number): string {
  return ms === 0 ? "-" : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
}

async function printLogs(service: Service, id: string, follow: boolean): Promise<void> {
  const at = { stdout: 0, stderr: 0 };
  // Without -f: what is stored now, then stop (the stream would wait for more).
  let until: typeof at | null = null;
  if (!follow) {
    let job: JobMessage | undefined;
    for await (const found of service.list([id])) if (found.id === id) job = found;
    if (job === undefined) throw new CallFailed(`NOT_FOUND: no job "${id}"`, ExitCode.FAILED);
    until = { stdout: job.stdoutBytes, stderr: job.stderrBytes };
    if (until.stdout === 0 && until.stderr === 0) return;
  }
  let stream: grpc.ClientReadableStream<OutputMessage> | null = null;
  const open = () =>
    stream = service.client.FollowIO({ id, readStdout: at.stdout, readStderr: at.stderr });
  await service.stream(open, async (message) => {
    if (message.stdout?.length) await writeAll(Deno.stdout, message.stdout);
    if (message.stderr?.length) await writeAll(Deno.stderr, message.stderr);
    at.stdout = message.stdoutOffset;
    at.stderr = message.stderrOffset;
    if (message.truncated) {
      printErr(`denit job: the output of "${id}" was cut short (the per-job cap, or a full spool)`);
    }
    if (until !== null && at.stdout >= until.stdout && at.stderr >= until.stderr) {
      (stream as grpc.ClientReadableStream<OutputMessage> | null)?.cancel();
    }
  }).catch((err: unknown) => {
    if (!(err instanceof CallFailed && err.message.startsWith("CANCELLED"))) throw err;
  });
}

/** Follows a job to its end (printing each status with `print`); resolves to its last. */
async function followStatus(service: Service, id: string, print: boolean): Promise<JobMessage> {
  let last: JobMessage | null = null;
  await service.stream(() => service.client.Follow({ id }), (job) => {
    last = job;
    if (print) printOut(describeJob(job));
    return Promise.resolve();
  });
  if (last === null) throw new CallFailed("the service sent nothing", ExitCode.INTERNAL);
  return last;
}

/** grpc-js reads `unix:PATH` with a pattern that ends at a line break: such a path is refused. */
function parseSocket(text: string): string {
  if (!/[\n\r\u2028\u2029]/.test(text)) return text;
  throw new RangeError(`Invalid socket path "${text}": gRPC cannot reach a path with a line break`);
}

function parseEnv(text: string): [string, string] {
  const eq = text.indexOf("=");
  if (eq <= 0) throw new RangeError(`Invalid environment entry "${text}": use KEY=VALUE`);
  return [text.slice(0, eq), text.slice(eq + 1)];
}

const COMMANDS = ["run", "follow", "logs", "cancel", "list"];
const VALUE_OPTIONS = new Set(OPTIONS.filter((o) => o.kind === "value").flatMap((o) => o.names));

/** What `denit job` was asked: its help, or a command with its options and words. */
type JobInvocation =
  | { readonly kind: "help" }
  | { readonly kind: "run"; command: string; settings: Settings; rest: readonly string[] };

/** Parses `denit job`'s arguments; throws UsageError (or RangeError) for a bad one. */
function parseJobArgs(args: readonly string[]): JobInvocation {
  // Options may come before the job command too (`denit job --socket S list`).
  const at = args.findIndex((arg, i) =>
    !arg.startsWith("-") && !VALUE_OPTIONS.has(args[i - 1] ?? "")
  );
  const command = at < 0 ? undefined : args[at];
  if (command === undefined && args.some((arg) => arg === "-h" || arg === "--help")) {
    return { kind: "help" };
  }
  if (command === undefined || !COMMANDS.includes(command)) {
    throw new UsageError(
      command === undefined ? "No job command given" : `Unknown job command "${command}"`,
    );
  }
  const options = [...args.slice(0, at), ...args.slice(at + 1)];
  // `run`'s options end at its command (`denit job run ls -l`), as denit's own do.
  const scan = scanArgs(options, OPTIONS, { stopAtPositional: command === "run" });
  if (scan.flags.has("help")) return { kind: "help" };
  const rest = scan.positional;
  const wantsId = command === "follow" || command === "logs" || command === "cancel";
  if (wantsId && rest.length !== 1) throw new UsageError(`"job ${command}" needs one job id`);
  if (command === "run" && rest.length === 0) throw new UsageError("No command given");
  if (command === "list" && rest.length > 0) throw new UsageError(`"job list" takes no id`);
  return { kind: "run", command, settings: new Settings(scan, OPTIONS, Deno.env.toObject()), rest };
}

/** Runs `denit job ARGS`; resolves to the exit code. */
export async function jobMain(args: readonly string[]): Promise<number> {
  // The service's own process, which denit starts (not a command for people).
  if (args[0] === "serve") return await (await import("./serve.ts")).serveMain(args.slice(1));
  let invocation: JobInvocation;
  let service: Service;
  try {
    invocation = parseJobArgs(args);
    if (invocation.kind === "help") {
      printOut(JOB_HELP);
      return ExitCode.OK;
    }
    const [socket, wait] = [invocation.settings.last("socket"), invocation.settings.last("wait")];
    service = new Service(
      socket === undefined ? DEFAULT_JOBS_SOCKET : parseFrom(socket, parseSocket),
      wait === undefined ? DEFAULT_WAIT_MS : Math.max(1, parseFrom(wait, parseDuration)),
    );
  } catch (err: unknown) {
    return usageError(err);
  }
  try {
    return await perform(invocation, service);
  } catch (err: unknown) {
    // stdout or stderr closed (`| head`): nothing more to say, as a process SIGPIPE ends.
    if (err instanceof Deno.errors.BrokenPipe) return ExitCode.SIGNAL_BASE + SIGPIPE;
    // An --env or --grace value is read when the call is made: a usage error all the same.
    if (!(err instanceof CallFailed)) return usageError(err);
    printErr(`denit job: ${escapeControls(err.message)}`);
    return err.exitCode;
  } finally {
    service.close();
  }
}

/** A usage error's lines and exit code; anything else is thrown on. */
function usageError(err: unknown): number {
  if (!(err instanceof UsageError) && !(err instanceof RangeError)) throw err;
  printUsageError(err.message, { prefix: "denit job", line: USAGE, command: "denit job" });
  return ExitCode.USAGE;
}

async function perform(
  { command, rest, settings }: Extract<JobInvocation, { kind: "run" }>,
  service: Service,
): Promise<number> {
  const id = rest[0] ?? "";
  switch (command) {
    case "run": {
      const request = {
        id: settings.last("id")?.value ?? crypto.randomUUID(),
        argv: rest,
        workDir: settings.last("workdir")?.value ?? "",
        env: Object.fromEntries(settings.list("env").map((e) => parseFrom(e, parseEnv))),
      };
      const job = await service.unary("Run", request);
      if (!settings.flag("follow")) {
        printOut(describeJob(job));
        // A job that could not be run has ended already (127: not found, 126: not runnable).
        return job.status === "RUNNING" ? ExitCode.OK : jobCode(job);
      }
      await printLogs(service, job.id, true);
      return jobCode(await followStatus(service, job.id, false));
    }
    case "follow":
      return jobCode(await followStatus(service, id, true));
    case "logs":
      await printLogs(service, id, settings.flag("follow"));
      return ExitCode.OK;
    case "cancel": {
      const grace = settings.last("grace");
      const graceMs = grace === undefined ? 0 : Math.max(1, parseFrom(grace, parseDuration));
      // The service answers once the job's processes are gone: after the grace at most.
      const workMs = (graceMs || DEFAULT_CANCEL_GRACE_MS) + NOTICE_AFTER_MS;
      const job = await service.unary("Cancel", { id, graceMs }, workMs);
      printOut(describeJob(job));
      return ExitCode.OK;
    }
    default: {
      // Printed once the service answered every page: a failure prints nothing on stdout.
      const lines = ["ID\tSTATUS\tEXIT\tPID\tSTARTED\tFINISHED\tCOMMAND"];
      for await (const job of service.list()) {
        const exit = job.status === "RUNNING" ? "-" : job.signal || String(job.exitCode);
        const when = [time(job.startedAtMs), time(job.finishedAtMs)];
        const line = [job.id, job.status.toLowerCase(), exit, job.pid, ...when];
        lines.push([...line, job.argv.map(escapeControls).join(" ")].join("\t"));
      }
      printOut(lines.join("\n"));
      return ExitCode.OK;
    }
  }
}
