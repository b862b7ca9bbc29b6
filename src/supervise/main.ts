/** The supervising program: parse, then supervise (the entry hands in the health endpoint). */

import { formatAddress } from "../common/address.ts";
import { formatCheck } from "../common/ready.ts";
import { errorLine, orElse, UsageError } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import * as logging from "../common/log.ts";
import type { HealthHandle, HealthStarter } from "../common/snapshot.ts";
import type { Launch } from "../sys/launch.ts";
import { blockedSignals, SignalReader, unblockable } from "../sys/signals.ts";
import { fileLimit } from "../sys/process.ts";
import { READ_SIGNALS, signalName } from "../common/signals.ts";
import { VERSION } from "../common/version.ts";
import { type Config, HELP, OPTIONS, parseInvocation, USAGE_LINE } from "./cli.ts";
import type { FaultPoint, Supervisor } from "./supervisor.ts";
import type { JobHost } from "../jobs/host.ts";
import type { RunAs } from "../common/accounts.ts";

/** The entry's: the launcher's record (null: none), the health loader, a test's fault injector. */
export interface SuperviseContext {
  readonly launch: Launch | null;
  readonly loadHealth: () => Promise<HealthStarter>;
  readonly trap?: (point: FaultPoint) => void;
}

/** An error's first line, in words for the three a bind meets most. */
function describe(err: unknown): string {
  if (err instanceof Deno.errors.AddrNotAvailable) return "address not available on this host";
  if (err instanceof Deno.errors.AddrInUse) return "address already in use";
  if (err instanceof Deno.errors.PermissionDenied) return "permission denied";
  return errorLine(err);
}

/** The log format asked for, read without the rest of the command line (which may be wrong). */
function askedFormat(args: readonly string[]): logging.LogFormat {
  let format = Deno.env.get("DENIT_LOG_FORMAT");
  for (let i = 0; i < args.length && args[i] !== "--"; i++) {
    const arg = args[i] ?? "";
    if (arg === "--log-format") format = args[i + 1];
    else if (arg.startsWith("--log-format=")) format = arg.slice("--log-format=".length);
  }
  return format === "json" ? "json" : "text";
}

/** A configuration error: one line in the log format asked for; exit 2. */
function configError(message: string, args: readonly string[], usage: boolean): number {
  if (askedFormat(args) === "json") {
    logging.printErr(
      logging.lineFormat("json", Deno.pid)("error", message, usage ? { usage: USAGE_LINE } : {}),
    );
  } else if (usage) {
    logging.printUsageError(message, { prefix: "denit", line: USAGE_LINE, command: "denit" });
  } else {
    logging.printErr(`denit: ${logging.escapeControls(message)}`);
  }
  return ExitCode.USAGE;
}

/** Runs denit with the given arguments (without the program name); resolves to the exit code. */
export async function superviseMain(
  args: readonly string[],
  context: SuperviseContext,
): Promise<number> {
  const launch = context.launch;
  // What ps and top show: "denit", not the runtime's "deno" (without /proc: "deno", no harm).
  orElse(() => Deno.writeTextFileSync("/proc/self/comm", "denit"), undefined);
  let invocation;
  try {
    invocation = parseInvocation(args, Deno.env.toObject());
  } catch (err: unknown) {
    if (!(err instanceof UsageError)) throw err;
    return configError(err.message, args, true);
  }
  if (invocation.kind === "help") {
    logging.printOut(HELP);
    return ExitCode.OK;
  }
  if (invocation.kind === "version") {
    logging.printOut(`denit ${VERSION} (deno ${Deno.version.deno})`);
    return ExitCode.OK;
  }
  // A signal the launcher left unblocked means no launcher, unless this thread cannot block it.
  const blocked = blockedSignals();
  const open = READ_SIGNALS.filter((signo) => !blocked.has(signo));
  if (launch === null || (open.length > 0 && open.length !== unblockable(open).length)) {
    logging.printErr(
      "denit: started without its launcher, which blocks the signals denit forwards before " +
        "the runtime starts: run the denit executable (the image's /denit, dist/denit), not " +
        "its bundle with deno run",
    );
    return ExitCode.INTERNAL;
  }
  const config = invocation.config;
  let runAs: RunAs | null = null;
  if (config.user !== null) {
    try {
      // Before anything starts: an unknown user is a usage error, and nothing runs.
      const { checkCanChangeUser, resolveUser } = await import("../common/accounts.ts");
      runAs = resolveUser(config.user);
      checkCanChangeUser(config.user);
    } catch (err: unknown) {
      if (!(err instanceof RangeError)) throw err;
      return configError(err.message, args, false);
    }
  }
  const log = logging.createLogger(config.logLevel, Deno.pid, config.logFormat);
  for (const warning of config.warnings) log.warn(warning);
  const names = launch.restored.join(",");
  if (names !== "") log.debug("put back what the launcher kept from the runtime", { names });
  try {
    return await run(config, log, context, { runAs, launch });
  } finally {
    // Lines that wait for stderr: a moment for them (EXIT_FLUSH_MS), never a wait on a reader.
    await log.flush();
  }
}

/** The supervisor and what runs beside it (the health endpoint, the job service), then the run. */
async function run(
  config: Config,
  log: logging.Logger,
  context: SuperviseContext,
  options: { runAs: RunAs | null; launch: Launch },
): Promise<number> {
  const { Supervisor } = await import("./supervisor.ts");
  const supervisor = new Supervisor(config, log, new SignalReader(READ_SIGNALS), {
    containerFileLimit: options.launch.fileSoftLimit,
    ...(context.trap === undefined ? {} : { trap: context.trap }),
  });
  let health: HealthHandle | null;
  try {
    // Bound before the child starts: a taken address must fail before anything runs.
    health = await startHealth(config, log, context, supervisor);
  } catch (err: unknown) {
    const address = config.health === null ? "" : formatAddress(config.health);
    log.error(`Cannot serve health on "${address}": ${describe(err)}`);
    return ExitCode.INTERNAL;
  }
  let jobs: JobHost | null = null;
  try {
    // Listening before the child starts, as the health endpoint: a bad path fails first.
    jobs = await startJobs(config, log, supervisor, options.launch.fileSoftLimit);
  } catch (err: unknown) {
    // The line says which place is wrong and how ("exists and is not a socket").
    log.error(describe(err));
    health?.close();
    return ExitCode.INTERNAL;
  }
  // The child's additions to the container's environment: NOTIFY_SOCKET, and HOME for --user.
  const { runAs, launch } = options;
  const notify = health?.notifySocket ?? null;
  const variables = {
    ...(notify === null ? {} : { NOTIFY_SOCKET: notify }),
    ...(runAs === null ? {} : { HOME: runAs.home }),
  };
  try {
    return await supervise(config, supervisor, log, launch, { runAs, variables });
  } finally {
    jobs?.close();
    health?.close();
  }
}

/** The job service (jobs/host.ts), loaded only with --jobs-socket. */
async function startJobs(
  config: Config,
  log: logging.Logger,
  supervisor: Supervisor,
  fileSoftLimit: number,
): Promise<JobHost | null> {
  if (config.jobsSocket === null) return null;
  const { JobHost } = await import("../jobs/host.ts");
  const host = new JobHost({
    socket: config.jobsSocket,
    spool: config.jobsSpool,
    log,
    logArgs: ["--log-level", config.logLevel, "--log-format", config.logFormat],
    onOomKill: () => supervisor.relieveMemory(),
    memory: supervisor.memoryCgroup,
    fileSoftLimit,
  });
  supervisor.attachJobs(host);
  try {
    await host.start();
  } catch (err: unknown) {
    host.close();
    throw err;
  }
  const socket = config.jobsSocket;
  log.info("job socket listening; the job service starts at the first connection", { socket });
  return host;
}

async function startHealth(
  config: Config,
  log: logging.Logger,
  context: SuperviseContext,
  supervisor: Supervisor,
): Promise<HealthHandle | null> {
  if (config.health === null) return null;
  const start = await context.loadHealth();
  const seconds = (ms: number | null) => ms === null ? null : ms / 1000;
  const server = await start(config.health, supervisor, {
    supervisorStartedAtMs: Date.now() - performance.now(),
    settings: {
      graceSeconds: seconds(config.graceMs),
      killAfterSeconds: seconds(config.killAfterMs),
      shutdownDelaySeconds: seconds(config.shutdownDelayMs),
      drainWhile: config.drainWhile === null ? null : formatCheck(config.drainWhile),
      killOrphansSeconds: seconds(config.orphanGraceMs),
      timeoutSeconds: seconds(config.timeoutMs),
      user: config.user,
      readyWhen: config.readyWhen === null ? null : formatCheck(config.readyWhen),
      waitDescendants: config.waitDescendants,
      stopSignal: config.stopSignal === null ? null : signalName(config.stopSignal),
    },
    readyWhen: config.readyWhen,
    fileLimit: fileLimit().soft,
  });
  log.info("health endpoint listening", { address: formatAddress(server.address) });
  return server;
}

/** denit's programs other than the supervisor, which come first on its command line. */
const PROGRAMS = ["init", "copy", "job", "probe", "bridge"];

/** A command that is one of denit's options or programs (after an ENTRYPOINT's "--"): a hint. */
function optionHint(name: string): string {
  if (PROGRAMS.includes(name)) {
    return `; "${name}" is a program of denit's, which comes before any "--": with an ` +
      `ENTRYPOINT ["/denit", "--"], run docker run --entrypoint /denit IMAGE ${name} ...`;
  }
  const spec = OPTIONS.find((option) => option.names.includes(name.split("=")[0] ?? ""));
  if (spec === undefined) return "";
  const variable = spec.env === undefined ? "" : `, or set ${spec.env} in the environment`;
  return `; it is an option of denit's: put options before "--"${variable} (an ENTRYPOINT ` +
    `that ends with "--" takes every argument as the command)`;
}

/** Once the child runs, nothing but its end may end denit: an uncaught error is one line. */
function keepGoing(log: logging.Logger): void {
  globalThis.addEventListener("error", (event) => {
    event.preventDefault();
    log.error("an uncaught error; denit goes on", { error: errorLine(event.error, true) });
  });
  globalThis.addEventListener("unhandledrejection", (event) => {
    event.preventDefault();
    const error = errorLine(event.reason, true);
    log.error("a rejection nobody handled; denit goes on", { error });
  });
}

async function supervise(
  config: Config,
  supervisor: Supervisor,
  log: logging.Logger,
  launch: Launch,
  child: { runAs: RunAs | null; variables: Readonly<Record<string, string>> },
): Promise<number> {
  let failure: { code: number; message: string } | null = null;
  // From here on a throw nobody catches must not end denit: the child may be running.
  keepGoing(log);
  try {
    // The command is the arguments' tail: its bytes as the launcher got them.
    await supervisor.start(launch.args.slice(launch.args.length - config.command.length), child);
  } catch (err: unknown) {
    const { ExecError } = await import("./command.ts");
    failure = err instanceof ExecError
      ? { code: err.exitCode, message: err.message + optionHint(config.command[0] ?? "") }
      : { code: ExitCode.INTERNAL, message: `Cannot start the supervisor: ${describe(err)}` };
    log.error(failure.message);
  }
  const code = failure?.code ?? await supervisor.finished();
  const exit = supervisor.exitReport();
  const { writeTerminationLog } = await import("./termination.ts");
  await writeTerminationLog(config.terminationLog, {
    exitCode: code,
    cause: exit?.cause ?? (failure === null ? "lost" : "start"),
    reason: exit?.text ?? failure?.message ?? "the child's exit status was lost",
    signal: exit?.signal ?? null,
    ranMs: exit?.ranMs ?? null,
  }, log);
  return code;
}
