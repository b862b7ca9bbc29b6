/**
 * `denit job`: a small client of the job service for people and scripts, in the same
 * executable. It speaks gRPC to the socket (directly, or through whatever carries it), and
 * `logs -f` resumes from the offsets it reached when a connection drops.
 */

import * as grpc from "@grpc/grpc-js";
import { option, type OptionSpec, parseFrom, scanArgs, Settings } from "../common/args.ts";
import { formatDuration, parseDuration } from "../common/duration.ts";
import { UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { escapeControls, printErr, printOut } from "../common/log.ts";
import { parseSignal } from "../common/signals.ts";
import { DEFAULT_JOBS_SOCKET } from "./contract.ts";
import { jobsDefinition } from "./proto.ts";
import type { JobMessage, OutputMessage } from "./service.ts";

/** How long a call waits for the service by default (`--wait`). */
const DEFAULT_WAIT_MS = 30_000;
/** After this long without an answer, denit job says that it waits. */
const NOTICE_AFTER_MS = 2000;
/** The service's grace for a Cancel that names none. */
const DEFAULT_CANCEL_GRACE_MS = 10_000;

const USAGE = "Usage: denit job run|follow|logs|cancel|list [--socket PATH] ...";

/** `denit job --help`. */
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
within --wait.`;

const OPTIONS: readonly OptionSpec[] = [
  option("--socket", "value", "DENIT_JOBS_SOCKET"),
  option("--id", "value"),
  option("-w --workdir", "value"),
  option("-e --env", "value"),
  option("--grace", "value"),
  option("--wait", "value", "DENIT_JOB_WAIT"),
  option("-f --follow", "flag"),
  option("-h --help", "flag"),
];

type Unary<T> = (
  request: object,
  options: grpc.CallOptions,
  callback: grpc.requestCallback<T>,
) => grpc.ClientUnaryCall;

type JobsClient = grpc.Client & {
  Run: Unary<JobMessage>;
  Cancel: Unary<JobMessage>;
  List: Unary<{ jobs: JobMessage[]; nextAfterId: string }>;
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
  const unreachable = err.code === grpc.status.UNAVAILABLE ||
    err.code === grpc.status.DEADLINE_EXCEEDED;
  // grpc-js's "No connection established. Last error: ... connect ENOENT PATH ...": one line
  // that says what to do.
  const connect = /connect (E[A-Z]+)/.exec(err.details ?? "")?.[1];
  if (err.code === grpc.status.UNAVAILABLE && connect !== undefined) {
    return new CallFailed(
      `no job service answers at "${socket}" (${connect}): it is the --jobs-socket of a ` +
        `running denit; give its path with --socket or DENIT_JOBS_SOCKET (from another ` +
        `container: through denit bridge)`,
      ExitCode.INTERNAL,
    );
  }
  return new CallFailed(
    `${grpc.status[err.code] ?? err.code}: ${err.details || err.message}`,
    unreachable ? ExitCode.INTERNAL : ExitCode.FAILED,
  );
}

/** Where the service is, how long to wait for it, and whether denit job said it waits. */
interface Reach {
  readonly socket: string;
  readonly waitMs: number;
  said: boolean;
  /** One connection, made again after it broke (grpc-js reconnects a client by itself, too). */
  client(): JobsClient;
}

/** Says once, on stderr, that denit job waits for the service. */
function sayWaiting(reach: Reach, what: string): void {
  if (reach.said) return;
  reach.said = true;
  printErr(`denit job: ${what}; waiting up to ${formatDuration(reach.waitMs)} (--wait)`);
}

function connect(socket: string): JobsClient {
  const Client = grpc.makeGenericClientConstructor(jobsDefinition(), "Jobs");
  return new Client(`unix:${socket}`, grpc.credentials.createInsecure()) as unknown as JobsClient;
}

/**
 * One call, given up `reach.waitMs` (plus `workMs`, what the call itself may take) after it was
 * made: the service may be starting, restarting, or stopped.
 */
function unary<T>(
  reach: Reach,
  call: (options: grpc.CallOptions, callback: grpc.requestCallback<T>) => grpc.ClientUnaryCall,
  workMs = 0,
): Promise<T> {
  const notice = setTimeout(
    () => sayWaiting(reach, `no answer yet from the job service at ${reach.socket}`),
    NOTICE_AFTER_MS,
  );
  return new Promise<T>((resolve, reject) => {
    call({ deadline: Date.now() + reach.waitMs + workMs }, (err, value) => {
      if (err?.code === grpc.status.DEADLINE_EXCEEDED) {
        reject(
          new CallFailed(
            `the job service at ${reach.socket} did not answer within ${
              formatDuration(reach.waitMs + workMs)
            }`,
            ExitCode.INTERNAL,
          ),
        );
      } else if (err !== null) reject(failure(err, reach.socket));
      else if (value === undefined) reject(new CallFailed("empty answer", ExitCode.INTERNAL));
      else resolve(value);
    });
  }).finally(() => clearTimeout(notice));
}

/** Writes all of `bytes` to a stream of this process. */
async function writeAll(target: typeof Deno.stdout, bytes: Uint8Array): Promise<void> {
  let done = 0;
  while (done < bytes.length) done += await target.write(bytes.subarray(done));
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

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A stream call that reconnects (with its own resume point) while the service is unreachable. */
async function resumable<T>(
  reach: Reach,
  open: () => grpc.ClientReadableStream<T>,
  onMessage: (message: T) => Promise<void>,
): Promise<void> {
  let lostAt: number | null = null;
  for (;;) {
    const result = await new Promise<grpc.ServiceError | null>((resolve) => {
      const stream = open();
      let chain = Promise.resolve();
      stream.on("data", (message: T) => {
        lostAt = null;
        stream.pause();
        chain = chain.then(() => onMessage(message)).then(() => void stream.resume());
      });
      stream.on("error", (err: grpc.ServiceError) => void chain.then(() => resolve(err)));
      stream.on("end", () => void chain.then(() => resolve(null)));
    });
    if (result === null) return;
    if (result.code !== grpc.status.UNAVAILABLE) throw failure(result, reach.socket);
    lostAt ??= performance.now();
    sayWaiting(reach, `the job service at ${reach.socket} cannot be reached`);
    if (performance.now() - lostAt > reach.waitMs) throw failure(result, reach.socket);
    await sleep(200);
  }
}

/** Every job, a page of List at a time (a page stays well under gRPC's message limit). */
async function* listAll(reach: Reach): AsyncGenerator<JobMessage> {
  for (let afterId = "";;) {
    const page = await unary<{ jobs: JobMessage[]; nextAfterId: string }>(
      reach,
      (o, cb) => reach.client().List({ afterId }, o, cb),
    );
    yield* page.jobs;
    if (page.nextAfterId === "") return;
    afterId = page.nextAfterId;
  }
}

/** How much of a job's output is stored now. */
async function stored(reach: Reach, id: string): Promise<{ stdout: number; stderr: number }> {
  const { jobs } = await unary<{ jobs: JobMessage[] }>(
    reach,
    (o, cb) => reach.client().List({ ids: [id] }, o, cb),
  );
  const job = jobs.find((j) => j.id === id);
  if (job === undefined) throw new CallFailed(`NOT_FOUND: no job "${id}"`, ExitCode.FAILED);
  return { stdout: job.stdoutBytes, stderr: job.stderrBytes };
}

async function printLogs(reach: Reach, id: string, follow: boolean): Promise<void> {
  const at = { stdout: 0, stderr: 0 };
  // Without -f: what is stored now, then stop (the stream would wait for more).
  const until = follow ? null : await stored(reach, id);
  if (until !== null && until.stdout === 0 && until.stderr === 0) return;
  let stream: grpc.ClientReadableStream<OutputMessage> | null = null;
  await resumable(
    reach,
    () => {
      stream = reach.client().FollowIO({ id, readStdout: at.stdout, readStderr: at.stderr });
      return stream;
    },
    async (message) => {
      if (message.stdout !== undefined && message.stdout.length > 0) {
        await writeAll(Deno.stdout, message.stdout);
      }
      if (message.stderr !== undefined && message.stderr.length > 0) {
        await writeAll(Deno.stderr, message.stderr);
      }
      at.stdout = message.stdoutOffset;
      at.stderr = message.stderrOffset;
      if (message.truncated) {
        printErr(
          `denit job: the output of "${id}" was cut short (the per-job cap, or a full spool)`,
        );
      }
      if (until !== null && at.stdout >= until.stdout && at.stderr >= until.stderr) {
        (stream as grpc.ClientReadableStream<OutputMessage> | null)?.cancel();
      }
    },
  ).catch((err: unknown) => {
    if (err instanceof CallFailed && err.message.startsWith("CANCELLED")) return;
    throw err;
  });
}

/** Follows a job to its end (printing each status with `print`); resolves to its last. */
async function followStatus(reach: Reach, id: string, print: boolean): Promise<JobMessage> {
  let last: JobMessage | null = null;
  await resumable(reach, () => reach.client().Follow({ id }), (job) => {
    last = job;
    if (print) printOut(describeJob(job));
    return Promise.resolve();
  });
  if (last === null) throw new CallFailed("the service sent nothing", ExitCode.INTERNAL);
  return last;
}

function parseEnv(text: string): [string, string] {
  const eq = text.indexOf("=");
  if (eq <= 0) throw new RangeError(`Invalid environment entry "${text}": use KEY=VALUE`);
  return [text.slice(0, eq), text.slice(eq + 1)];
}

const COMMANDS = ["run", "follow", "logs", "cancel", "list"];
const VALUE_OPTIONS = new Set(OPTIONS.filter((o) => o.kind === "value").flatMap((o) => o.names));

/** True when `arg` is the value of the option just before it (`--socket PATH`). */
function isOptionValue(args: readonly string[], arg: string): boolean {
  const before = args[args.indexOf(arg) - 1];
  return before !== undefined && VALUE_OPTIONS.has(before);
}

/** What `denit job` was asked: its help, or a command with its options and words. */
type JobInvocation =
  | { readonly kind: "help" }
  | { readonly kind: "run"; command: string; settings: Settings; rest: readonly string[] };

/** Parses `denit job`'s arguments; throws UsageError (or RangeError) for a bad one. */
function parseJobArgs(args: readonly string[]): JobInvocation {
  // Options may come before the job command too (`denit job --socket S list`).
  const at = args.findIndex((arg) => !arg.startsWith("-") && !isOptionValue(args, arg));
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
  const settings = new Settings(scan, OPTIONS, Deno.env.toObject());
  return { kind: "run", command, settings, rest };
}

/** Runs `denit job ARGS`; resolves to the exit code. */
export async function jobMain(args: readonly string[]): Promise<number> {
  // The service's own process, which denit starts (not a command for people).
  if (args[0] === "serve") return await (await import("./serve.ts")).serveMain(args.slice(1));
  let invocation: JobInvocation;
  let reach: Reach;
  let shared: JobsClient | null = null;
  try {
    invocation = parseJobArgs(args);
    if (invocation.kind === "help") {
      printOut(JOB_HELP);
      return ExitCode.OK;
    }
    const socket = invocation.settings.last("socket")?.value || DEFAULT_JOBS_SOCKET;
    const wait = invocation.settings.last("wait");
    reach = {
      socket,
      waitMs: wait === undefined ? DEFAULT_WAIT_MS : Math.max(1, parseFrom(wait, parseDuration)),
      said: false,
      client: () => (shared ??= connect(socket)),
    };
  } catch (err: unknown) {
    if (!(err instanceof UsageError) && !(err instanceof RangeError)) throw err;
    printErr(`denit job: ${err.message}\n${USAGE}\nTry 'denit job --help' for more information.`);
    return ExitCode.USAGE;
  }
  try {
    return await perform(invocation.command, invocation.rest, invocation.settings, reach);
  } catch (err: unknown) {
    if (err instanceof CallFailed || err instanceof RangeError) {
      printErr(`denit job: ${err.message}`);
      return err instanceof CallFailed ? err.exitCode : ExitCode.USAGE;
    }
    throw err;
  } finally {
    (shared as JobsClient | null)?.close();
  }
}

async function perform(
  command: string,
  rest: readonly string[],
  settings: Settings,
  reach: Reach,
): Promise<number> {
  const id = rest[0] ?? "";
  switch (command) {
    case "run":
      return await runJob(rest, settings, reach);
    case "follow":
      return jobCode(await followStatus(reach, id, true));
    case "logs":
      await printLogs(reach, id, settings.flag("follow"));
      return ExitCode.OK;
    case "cancel":
      return await cancelJob(id, settings, reach);
    default:
      return await listJobs(reach);
  }
}

async function runJob(argv: readonly string[], settings: Settings, reach: Reach): Promise<number> {
  const env = Object.fromEntries(settings.list("env").map((e) => parseFrom(e, parseEnv)));
  const request = {
    id: settings.last("id")?.value ?? crypto.randomUUID(),
    argv,
    workDir: settings.last("workdir")?.value ?? "",
    env,
  };
  const job = await unary<JobMessage>(reach, (o, cb) => reach.client().Run(request, o, cb));
  if (!settings.flag("follow")) {
    printOut(describeJob(job));
    // A job that could not be run has ended already (127: not found, 126: not runnable).
    return job.status === "RUNNING" ? ExitCode.OK : jobCode(job);
  }
  await printLogs(reach, job.id, true);
  return jobCode(await followStatus(reach, job.id, false));
}

async function cancelJob(id: string, settings: Settings, reach: Reach): Promise<number> {
  const grace = settings.last("grace");
  const graceMs = grace === undefined ? 0 : Math.max(1, parseFrom(grace, parseDuration));
  // The service answers once the group is gone: after the grace (its default 10 s) at most.
  const job = await unary<JobMessage>(
    reach,
    (o, cb) => reach.client().Cancel({ id, graceMs }, o, cb),
    (graceMs || DEFAULT_CANCEL_GRACE_MS) + NOTICE_AFTER_MS,
  );
  printOut(describeJob(job));
  return ExitCode.OK;
}

async function listJobs(reach: Reach): Promise<number> {
  // The header once the service answered: a failure prints nothing on stdout.
  let header = false;
  const printHeader = () => {
    if (!header) printOut("ID\tSTATUS\tEXIT\tPID\tSTARTED\tFINISHED\tCOMMAND");
    header = true;
  };
  for await (const job of listAll(reach)) {
    printHeader();
    const exit = job.status === "RUNNING" ? "-" : job.signal || String(job.exitCode);
    const when = [time(job.startedAtMs), time(job.finishedAtMs)];
    const command = job.argv.map(escapeControls).join(" ");
    printOut([job.id, job.status.toLowerCase(), exit, job.pid, ...when, command].join("\t"));
  }
  printHeader();
  return ExitCode.OK;
}
