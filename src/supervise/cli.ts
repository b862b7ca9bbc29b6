/**
 * The command line and `DENIT_*` environment → one frozen Config; flags win. Options end at `--`
 * or at the first word that is not one (tini's `+` getopt): `denit ls -l` runs `ls -l`.
 */

import { parseCheck } from "../common/ready.ts";
import { DEFAULT_HEALTH, parseListenAddress } from "../common/address.ts";
import { option, parseFrom, scanArgs, Settings, unknownVariables } from "../common/args.ts";
import type { OptionSpec, Sourced } from "../common/args.ts";
import { parseDuration } from "../common/duration.ts";
import { UsageError } from "../common/errors.ts";
import { LOG_LEVELS, type LogFormat, type LogLevel } from "../common/log.ts";
import { FORWARDED, parseSignal, SIGNAL_TABLE, signalName } from "../common/signals.ts";

/** The child's soft limit of open files: as the runtime left it, the hard limit, or a number. */
export type FileLimitSetting =
  | { readonly kind: "default" }
  | { readonly kind: "max" }
  | { readonly kind: "value"; readonly value: number };

/** Everything the supervisor needs, validated (a null turns its feature off). */
export type Config = ReturnType<typeof buildConfig>;

export type Invocation =
  | { kind: "help" }
  | { kind: "version" }
  | { kind: "run"; config: Config };

/** Default bound for leftovers between SIGTERM and SIGKILL once the child has exited. */
export const DEFAULT_KILL_AFTER_MS = 3000;

/** Where the jobs' output goes unless --jobs-spool says otherwise. */
export const DEFAULT_JOBS_SPOOL = "/tmp/denit-jobs";

/** One line of usage, printed after a usage error. */
export const USAGE_LINE = "Usage: denit [OPTIONS] [--] COMMAND [ARGS...]";

export const HELP = `${USAGE_LINE}
       denit init [OPTIONS] DEST [--with PATH]...
       denit copy [OPTIONS] SRC... DEST
       denit job run|follow|logs|cancel|list [OPTIONS] ...
       denit bridge [SOCKET]
       denit probe [--health-addr ADDR] [--path PATH] [--timeout DURATION]

Runs COMMAND as a child: forwards signals to it, reaps every zombie, stops what it
left behind, and exits with its status. Every option has a DENIT_* environment twin;
options win over the environment.

Options:
  -g, --group              send signals to the child's process group   DENIT_GROUP=1
  -r, --rewrite FROM:TO    send TO instead of FROM (TO=0 drops FROM)   DENIT_REWRITE=FROM:TO,...
  -e, --remap-exit CODE    exit 0 when the child exits with CODE       DENIT_REMAP_EXIT=CODE,...
  -s, --subreaper          adopt orphans when not PID 1                DENIT_SUBREAPER=1
  -p, --pdeathsig SIGNAL   get SIGNAL when denit's parent dies         DENIT_PDEATHSIG=SIGNAL
      --grace DURATION     SIGKILL the child DURATION after a stop     DENIT_GRACE=DURATION
                           signal (TERM, INT, QUIT); off by default (0 = off)
      --stop-signal SIGNAL  SIGNAL is a stop too: grace, shutdown     DENIT_STOP_SIGNAL=SIGNAL
                           delay and /readyz as for TERM (a pod's stopSignal)
      --kill-after DURATION  after the child exits, SIGKILL leftovers  DENIT_KILL_AFTER=DURATION
                           this long after SIGTERM (default 3s, 0 = at once)
      --shutdown-delay DURATION  hold a first stop signal this long, not DENIT_SHUTDOWN_DELAY=DURATION
                           ready meanwhile (load balancers drain first)
      --drain-while CHECK  hold it only while CHECK holds: tcp:PORT,   DENIT_DRAIN_WHILE=CHECK
                           http:PORT/PATH, file:PATH or jobs (jobs running)
      --kill-orphans[=DURATION]  TERM processes reparented to denit  DENIT_KILL_ORPHANS=DURATION
                           while the child runs, KILL after DURATION (default --kill-after)
      --timeout DURATION   TERM the child at this deadline, then KILL  DENIT_TIMEOUT=DURATION
                           after --grace (or --kill-after); exit 124 (0 = off)
  -u, --user USER[:GROUP]  run the child as this user (names from      DENIT_USER=USER[:GROUP]
                           /etc/passwd and /etc/group, or numbers)
      --ready-when CHECK   /readyz waits for tcp:PORT, http:PORT/PATH, DENIT_READY_WHEN=CHECK
                           file:PATH or notify (sd_notify READY=1)
      --wait-descendants   when the child exits, wait for what it left DENIT_WAIT_DESCENDANTS=1
                           running (signals go to them) instead of stopping it
      --nofile N|max       the child's open-file soft limit            DENIT_NOFILE=N|max
      --oom-score-adj N    the child's oom_score_adj, -1000 to 1000    DENIT_OOM_SCORE_ADJ=N
                           (higher: the OOM killer's pick before denit)
      --health             serve /healthz, /readyz, /status, /metrics  DENIT_HEALTH=1
                           on port 7623 of every address (IPv6 and IPv4)
      --health-addr ADDR   the same on HOST:PORT, :PORT, [V6]:PORT     DENIT_HEALTH_ADDR=ADDR
                           (:PORT and [::]:PORT: IPv6 and IPv4; 0.0.0.0:PORT: IPv4 only)
      --termination-log PATH  write why it ended to PATH at exit       DENIT_TERMINATION_LOG=PATH
                           (default: /dev/termination-log if there and empty)
      --jobs-socket PATH   serve the job service (gRPC) on this Unix   DENIT_JOBS_SOCKET=PATH
                           socket, mode 0600; see 'denit job --help'
      --jobs-spool DIR     the jobs' output files, an absolute path    DENIT_JOBS_SPOOL=DIR
                           (default /tmp/denit-jobs, created 0700)
  -w, --warn-reaped        a warn line for each reaped orphan          DENIT_WARN_REAPED=1
      --log-format FORMAT  text (default) or json, one object a line   DENIT_LOG_FORMAT=text|json
  -v, --verbose            more log lines on stderr (repeatable)       DENIT_LOG_LEVEL=error|warn|info|debug
  -h, --help               this text
      --version            denit's version

DURATION is a number with ms, s, m or h (a bare number is seconds), at most 24h;
0 turns --grace, --timeout and --shutdown-delay off. An empty value (flag or
variable) is the same as none.
SIGNAL is a name (TERM, SIGTERM) or a number. Exit status: the child's, 128+N if it
died of signal N, 124 --timeout passed, 126 not executable, 127 not found, 2 usage
error, 125 denit failed.`;

export const OPTIONS: readonly OptionSpec[] = [
  option("-g --group", "flag", "DENIT_GROUP"),
  option("-r --rewrite", "value", "DENIT_REWRITE"),
  option("-e --remap-exit", "value", "DENIT_REMAP_EXIT"),
  option("-s --subreaper", "flag", "DENIT_SUBREAPER"),
  option("-p --pdeathsig", "value", "DENIT_PDEATHSIG"),
  option("--grace", "value", "DENIT_GRACE"),
  option("--kill-after", "value", "DENIT_KILL_AFTER"),
  option("--nofile", "value", "DENIT_NOFILE"),
  option("--oom-score-adj", "value", "DENIT_OOM_SCORE_ADJ"),
  option("--shutdown-delay", "value", "DENIT_SHUTDOWN_DELAY"),
  option("--drain-while", "value", "DENIT_DRAIN_WHILE"),
  option("--kill-orphans", "optional", "DENIT_KILL_ORPHANS"),
  option("--timeout", "value", "DENIT_TIMEOUT"),
  option("--stop-signal", "value", "DENIT_STOP_SIGNAL"),
  option("-u --user", "value", "DENIT_USER"),
  option("--ready-when", "value", "DENIT_READY_WHEN"),
  option("--wait-descendants", "flag", "DENIT_WAIT_DESCENDANTS"),
  option("--health", "flag", "DENIT_HEALTH"),
  option("--health-addr", "value", "DENIT_HEALTH_ADDR"),
  option("--termination-log", "value", "DENIT_TERMINATION_LOG"),
  option("--jobs-socket", "value", "DENIT_JOBS_SOCKET"),
  option("--jobs-spool", "value", "DENIT_JOBS_SPOOL"),
  option("-w --warn-reaped", "flag", "DENIT_WARN_REAPED"),
  option("--log-format", "value", "DENIT_LOG_FORMAT"),
  option("-v --verbose", "flag"),
  option("-h --help", "flag"),
  option("--version", "flag"),
];

/** Every variable denit reads; any other DENIT_* variable gets a warning. */
export const VARIABLES: readonly string[] = [
  ...OPTIONS.flatMap((spec) => spec.env === undefined ? [] : [spec.env]),
  "DENIT_LOG_LEVEL",
];

/** One of `choices`, case and blanks aside; `what` names the value in the error. */
function oneOf<T extends string>(text: string, choices: readonly T[], what: string): T {
  const found = choices.find((choice) => choice === text.trim().toLowerCase());
  const list = choices.join(", ").replace(/, (?=\w+$)/, " or ");
  if (found === undefined) throw new RangeError(`Invalid ${what} "${text}": use ${list}`);
  return found;
}

const FORMATS: readonly LogFormat[] = ["text", "json"];

/** sockaddr_un holds 107 bytes of path and a NUL. */
const MAX_SOCKET_PATH_BYTES = 107;

function parseSocketPath(text: string): string {
  const bytes = new TextEncoder().encode(text).length;
  // deno-lint-ignore no-control-regex -- gRPC clients read `unix:PATH` as a URI, which has none
  const control = /[\u0000-\u001f\u007f]/.test(text);
  const why = !text.startsWith("/")
    ? "use an absolute path, like /run/denit/jobs.sock"
    : control
    ? "it holds a control character, and gRPC clients cannot reach such a path"
    : bytes > MAX_SOCKET_PATH_BYTES
    ? `${bytes} bytes, a Unix socket's path holds at most ${MAX_SOCKET_PATH_BYTES}`
    : null;
  if (why !== null) throw new RangeError(`Invalid socket path "${text}": ${why}`);
  return text;
}

/** The spool is walked from / (each part trusted): a relative one would name another place. */
function parseSpool(text: string): string {
  if (text.startsWith("/")) return text;
  throw new RangeError(`Invalid spool "${text}": use an absolute path, like ${DEFAULT_JOBS_SPOOL}`);
}

/** A signal denit receives and passes on; `what` names the value in the error. */
function forwardedSignal(text: string, what: string): number {
  const signo = parseSignal(text);
  if (!FORWARDED.includes(signo)) {
    const why = SIGNAL_TABLE.find((r) => r.signo === signo)?.why ?? "the C library's own";
    throw new RangeError(`Invalid ${what}: denit never passes ${signalName(signo)} on (${why})`);
  }
  return signo;
}

function parseRewrite(text: string): [number, number] {
  const parts = text.split(":");
  const [from, to] = parts;
  if (parts.length !== 2 || from === undefined || to === undefined) {
    throw new RangeError(`Invalid rewrite "${text}": use FROM:TO`);
  }
  // FROM must be a signal denit receives and passes on; any other rewrite would never apply.
  const signo = forwardedSignal(from, `rewrite "${text}"`);
  return [signo, to.trim() === "0" ? 0 : parseSignal(to)];
}

function parseExitCode(text: string): number {
  if (!/^\d{1,3}$/.test(text.trim()) || Number(text) > 255) {
    throw new RangeError(`Invalid exit code "${text}": use 0 to 255`);
  }
  return Number(text);
}

function parseFileLimit(text: string): FileLimitSetting {
  const trimmed = text.trim().toLowerCase();
  if (trimmed === "max") return { kind: "max" };
  if (/^\d{1,10}$/.test(trimmed) && Number(trimmed) >= 1) {
    return { kind: "value", value: Number(trimmed) };
  }
  throw new RangeError(`Invalid open-file limit "${text}": use a number from 1, or max`);
}

function parseOomScoreAdj(text: string): number {
  const trimmed = text.trim();
  const value = Number(trimmed);
  if (/^[-+]?\d{1,4}$/.test(trimmed) && value >= -1000 && value <= 1000) return value;
  throw new RangeError(`Invalid oom_score_adj "${text}": use a whole number from -1000 to 1000`);
}

/** tini's variables, honoured so that switching from tini changes only the binary. */
function tiniAliases(env: Readonly<Record<string, string>>) {
  // tini tests these with getenv() != NULL: set at all, to any value, means on.
  const verbosity = env.TINI_VERBOSITY;
  const level = verbosity === undefined || !/^\d+$/.test(verbosity.trim())
    ? undefined
    : LOG_LEVELS[Math.min(Number(verbosity), LOG_LEVELS.length - 1)];
  return {
    subreaper: env.TINI_SUBREAPER !== undefined,
    group: env.TINI_KILL_PROCESS_GROUP !== undefined,
    level,
  };
}

/** A duration whose 0 turns its feature off (null). */
function limit(source: Sourced | undefined): number | null {
  const ms = source === undefined ? 0 : parseFrom(source, parseDuration);
  return ms === 0 ? null : ms;
}

/** `--kill-orphans=D`, else `--kill-orphans` (--kill-after), else its variable; null: off. */
function orphanGrace(settings: Settings, killAfterMs: number): number | null {
  const given = settings.last("kill-orphans");
  const flag = settings.count("kill-orphans") > 0;
  if (given !== undefined && !(flag && given.from === "DENIT_KILL_ORPHANS")) {
    return parseFrom(given, parseDuration);
  }
  return flag ? killAfterMs : null;
}

/** The option's last value, parsed; null when it was not given. */
function parsed<T>(settings: Settings, key: string, parse: (text: string) => T): T | null {
  const source = settings.last(key);
  return source === undefined ? null : parseFrom(source, parse);
}

/** DENIT_LOG_LEVEL (else TINI_VERBOSITY, else warn), raised once per -v. */
function logLevel(settings: Settings, env: Readonly<Record<string, string>>): LogLevel {
  const variable = { value: env.DENIT_LOG_LEVEL ?? "", from: "DENIT_LOG_LEVEL" };
  const base = variable.value.trim() === ""
    ? tiniAliases(env).level ?? "warn"
    : parseFrom(variable, (t) => oneOf(t, LOG_LEVELS, "log level"));
  const index = LOG_LEVELS.indexOf(base) + settings.count("verbose");
  return LOG_LEVELS[Math.min(index, LOG_LEVELS.length - 1)] ?? "debug";
}

/** The checks that need another option: refused with the option that is missing. */
function requireOthers(config: Config, settings: Settings): void {
  const need = (name: string, what: string) => {
    const from = settings.last(name.split(" ")[0] ?? "")?.from;
    throw new UsageError(`Option "--${name}" needs ${what} (from ${from})`);
  };
  if (config.readyWhen !== null && config.health === null) {
    need("ready-when", "the health endpoint: add --health or --health-addr");
  }
  if (config.drainWhile !== null && config.shutdownDelayMs === 0) {
    need("drain-while", "--shutdown-delay, the longest it may hold a stop");
  }
  if (config.drainWhile?.kind === "jobs" && config.jobsSocket === null) {
    need("drain-while jobs", "the job service: add --jobs-socket");
  }
}

function buildConfig(
  command: readonly string[],
  settings: Settings,
  env: Readonly<Record<string, string>>,
) {
  const tini = tiniAliases(env);
  const parseEach = <T>(key: string, parse: (text: string) => T) =>
    settings.list(key).map((item) => parseFrom(item, parse));
  const killAfterMs = parsed(settings, "kill-after", parseDuration) ?? DEFAULT_KILL_AFTER_MS;
  const warnings = unknownVariables(env, "DENIT_", VARIABLES);
  const config = Object.freeze({
    command: Object.freeze([...command]),
    group: settings.flag("group") || tini.group,
    // signal number → signal number to send instead; 0 drops the signal
    rewrite: new Map(parseEach("rewrite", parseRewrite)) as ReadonlyMap<number, number>,
    remapExit: new Set(parseEach("remap-exit", parseExitCode)) as ReadonlySet<number>,
    subreaper: settings.flag("subreaper") || tini.subreaper,
    pdeathsig: parsed(settings, "pdeathsig", parseSignal),
    graceMs: limit(settings.last("grace")),
    killAfterMs,
    logLevel: logLevel(settings, env),
    health: parsed(settings, "health-addr", parseListenAddress) ??
      (settings.flag("health") ? DEFAULT_HEALTH : null),
    fileLimit: parsed(settings, "nofile", parseFileLimit) ??
      { kind: "default" } as FileLimitSetting,
    shutdownDelayMs: limit(settings.last("shutdown-delay")) ?? 0,
    drainWhile: parsed(settings, "drain-while", (text) => parseCheck(text, "jobs")),
    orphanGraceMs: orphanGrace(settings, killAfterMs),
    timeoutMs: limit(settings.last("timeout")),
    user: settings.last("user")?.value.trim() ?? null, // USER[:GROUP], resolved later
    readyWhen: parsed(settings, "ready-when", (text) => parseCheck(text, "notify")),
    waitDescendants: settings.flag("wait-descendants"),
    terminationLog: settings.last("termination-log")?.value ?? null,
    warnReaped: settings.flag("warn-reaped"),
    logFormat: parsed(settings, "log-format", (t) => oneOf(t, FORMATS, "log format")) ?? "text",
    jobsSocket: parsed(settings, "jobs-socket", parseSocketPath),
    jobsSpool: parsed(settings, "jobs-spool", parseSpool) ?? DEFAULT_JOBS_SPOOL,
    oomScoreAdj: parsed(settings, "oom-score-adj", parseOomScoreAdj),
    // It must reach denit (KILL and STOP never do) to start a stop.
    stopSignal: parsed(settings, "stop-signal", (t) => forwardedSignal(t, `stop signal "${t}"`)),
    warnings: Object.freeze(warnings), // logged once a logger exists
  });
  requireOthers(config, settings);
  return config;
}

/** Parses denit's arguments (without the program name) and environment. */
export function parseInvocation(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
): Invocation {
  const scan = scanArgs(args, OPTIONS, { stopAtPositional: true });
  if (scan.flags.has("help")) return { kind: "help" };
  if (scan.flags.has("version")) return { kind: "version" };
  if (scan.positional.length === 0) throw new UsageError("No command given");
  const settings = new Settings(scan, OPTIONS, env);
  return { kind: "run", config: buildConfig(scan.positional, settings, env) };
}
