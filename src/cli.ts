/**
 * Command line and `DENIT_*` environment → one frozen Config. Flags win over the environment.
 *
 * Options end at `--` or at the first word that is not an option (as tini's `+` getopt), so
 * `denit ls -l` runs `ls -l`.
 */

import { LOG_LEVELS, type LogLevel } from "./log.ts";
import { parseSignal } from "./signals.ts";

/** A bad command line or environment variable; the message is one line. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** Where the health endpoint listens. */
export interface ListenAddress {
  readonly hostname: string;
  readonly port: number;
}

/** Everything the supervisor needs, validated. */
export interface Config {
  readonly command: readonly string[];
  readonly group: boolean;
  /** signal number → signal number to send instead; 0 drops the signal. */
  readonly rewrite: ReadonlyMap<number, number>;
  readonly remapExit: ReadonlySet<number>;
  readonly subreaper: boolean;
  readonly pdeathsig: number | null;
  readonly graceMs: number | null;
  readonly killAfterMs: number;
  readonly logLevel: LogLevel;
  readonly health: ListenAddress | null;
}

/** What the command line asks for. */
export type Invocation =
  | { kind: "help" }
  | { kind: "version" }
  | { kind: "run"; config: Config };

/** Default bound for leftovers between SIGTERM and SIGKILL once the child has exited. */
export const DEFAULT_KILL_AFTER_MS = 3000;
/** The health endpoint's default address, GOAT's port. */
export const DEFAULT_HEALTH: ListenAddress = Object.freeze({ hostname: "0.0.0.0", port: 7623 });

/** One line of usage, printed after a usage error. */
export const USAGE_LINE = "Usage: denit [OPTIONS] [--] COMMAND [ARGS...]";

/** The `--help` text. */
export const HELP = `${USAGE_LINE}
       denit init DEST [--with PATH]...
       denit copy [OPTIONS] SRC... DEST

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
                           signal (TERM, INT, QUIT); off by default
      --kill-after DURATION  after the child exits, SIGKILL leftovers  DENIT_KILL_AFTER=DURATION
                           this long after SIGTERM (default 3s, 0 = at once)
      --health             serve /healthz, /readyz, /status, /metrics  DENIT_HEALTH=1
                           on 0.0.0.0:7623
      --health-addr ADDR   the same on HOST:PORT, :PORT or [V6]:PORT   DENIT_HEALTH_ADDR=ADDR
  -v, --verbose            more log lines on stderr (repeatable)       DENIT_LOG_LEVEL=warn|info|debug
  -h, --help               this text
      --version            denit's version

DURATION is a number with ms, s or m (a bare number is seconds). SIGNAL is a name
(TERM, SIGTERM) or a number. Exit status: the child's, 128+N if it died of signal N,
126 not executable, 127 not found, 2 usage error, 125 denit failed.`;

type Kind = "flag" | "value";

const OPTIONS: Readonly<Record<string, { key: string; kind: Kind }>> = {
  "-g": { key: "group", kind: "flag" },
  "--group": { key: "group", kind: "flag" },
  "-r": { key: "rewrite", kind: "value" },
  "--rewrite": { key: "rewrite", kind: "value" },
  "-e": { key: "remap-exit", kind: "value" },
  "--remap-exit": { key: "remap-exit", kind: "value" },
  "-s": { key: "subreaper", kind: "flag" },
  "--subreaper": { key: "subreaper", kind: "flag" },
  "-p": { key: "pdeathsig", kind: "value" },
  "--pdeathsig": { key: "pdeathsig", kind: "value" },
  "--grace": { key: "grace", kind: "value" },
  "--kill-after": { key: "kill-after", kind: "value" },
  "--health": { key: "health", kind: "flag" },
  "--health-addr": { key: "health-addr", kind: "value" },
  "-v": { key: "verbose", kind: "flag" },
  "--verbose": { key: "verbose", kind: "flag" },
  "-h": { key: "help", kind: "flag" },
  "--help": { key: "help", kind: "flag" },
  "--version": { key: "version", kind: "flag" },
};

interface Scanned {
  readonly flags: Map<string, number>;
  readonly values: Map<string, string[]>;
  readonly command: string[];
}

function expandShort(arg: string): string[] {
  // "-gsv" → "-g", "-s", "-v"; "-rTERM:QUIT" → "-r", "TERM:QUIT".
  const out: string[] = [];
  for (let i = 1; i < arg.length; i++) {
    const name = `-${arg[i]}`;
    out.push(name);
    if (OPTIONS[name]?.kind === "value" && i + 1 < arg.length) {
      out.push(arg.slice(i + 1));
      break;
    }
  }
  return out;
}

function scan(args: readonly string[]): Scanned {
  const flags = new Map<string, number>();
  const values = new Map<string, string[]>();
  const pending = [...args];
  while (pending.length > 0) {
    const arg = pending.shift() as string;
    if (arg === "--") return { flags, values, command: pending };
    if (!arg.startsWith("-") || arg === "-") return { flags, values, command: [arg, ...pending] };
    if (!arg.startsWith("--") && arg.length > 2) {
      pending.unshift(...expandShort(arg));
      continue;
    }
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const option = OPTIONS[name];
    if (option === undefined) throw new UsageError(`Unknown option "${name}"`);
    if (option.kind === "flag") {
      if (eq > 0) throw new UsageError(`Option "${name}" takes no value`);
      flags.set(option.key, (flags.get(option.key) ?? 0) + 1);
      continue;
    }
    const value = eq > 0 ? arg.slice(eq + 1) : pending.shift();
    if (value === undefined) throw new UsageError(`Option "${name}" needs a value`);
    values.set(option.key, [...(values.get(option.key) ?? []), value]);
  }
  return { flags, values, command: [] };
}

/** Parses "10s", "500ms", "1.5m" or "2" (seconds) into milliseconds. */
export function parseDuration(text: string): number {
  const match = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (match === null) {
    throw new RangeError(`Invalid duration "${text}": use a number with ms, s or m, like "10s"`);
  }
  const scale = match[2] === "ms" ? 1 : match[2] === "m" ? 60_000 : 1000;
  const ms = Math.round(Number(match[1]) * scale);
  // setTimeout(2) overflows past 2^31-1 ms; a day is plenty for any grace period.
  if (ms > 86_400_000) throw new RangeError(`Invalid duration "${text}": at most 24h`);
  return ms;
}

/** Parses "HOST:PORT", ":PORT" or "[V6]:PORT"; an empty host means 0.0.0.0. */
export function parseListenAddress(text: string): ListenAddress {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]*)):(\d{1,5})$/.exec(text.trim());
  const port = match === null ? NaN : Number(match[3]);
  if (match === null || port > 65535) {
    throw new RangeError(`Invalid address "${text}": use HOST:PORT, :PORT or [V6]:PORT`);
  }
  const hostname = match[1] ?? (match[2] === "" ? "0.0.0.0" : match[2]);
  return Object.freeze({ hostname, port });
}

function parseBoolean(name: string, text: string): boolean {
  const lowered = text.trim().toLowerCase();
  if (["1", "true", "yes", "on"].includes(lowered)) return true;
  if (["", "0", "false", "no", "off"].includes(lowered)) return false;
  throw new UsageError(`Invalid ${name} "${text}": use 1 or 0`);
}

function parseRewrite(text: string): [number, number] {
  const parts = text.split(":");
  if (parts.length !== 2) throw new RangeError(`Invalid rewrite "${text}": use FROM:TO`);
  const to = parts[1].trim() === "0" ? 0 : parseSignal(parts[1]);
  return [parseSignal(parts[0]), to];
}

function parseExitCode(text: string): number {
  if (!/^\d{1,3}$/.test(text.trim()) || Number(text) > 255) {
    throw new RangeError(`Invalid exit code "${text}": use 0 to 255`);
  }
  return Number(text);
}

function parseLogLevel(text: string): LogLevel {
  const found = LOG_LEVELS.find((level) => level === text.trim().toLowerCase());
  if (found === undefined) {
    throw new RangeError(`Invalid log level "${text}": use ${LOG_LEVELS.join(", ")}`);
  }
  return found;
}

function splitList(text: string): string[] {
  return text.split(/[,\s]+/).filter((item) => item !== "");
}

/** Reads one setting: flag values if given, else the environment variable's list, else none. */
function pick(
  scanned: Scanned,
  env: Readonly<Record<string, string>>,
  key: string,
  variable: string,
): { from: string; items: string[] } {
  const fromFlags = scanned.values.get(key);
  if (fromFlags !== undefined) return { from: `--${key}`, items: fromFlags };
  const fromEnv = env[variable];
  return { from: variable, items: fromEnv === undefined ? [] : splitList(fromEnv) };
}

function wrap<T>(from: string, parse: () => T): T {
  try {
    return parse();
  } catch (err: unknown) {
    if (err instanceof RangeError) throw new UsageError(`${err.message} (from ${from})`);
    throw err;
  }
}

function lastOf(items: string[]): string | undefined {
  return items.at(-1);
}

function buildConfig(scanned: Scanned, env: Readonly<Record<string, string>>): Config {
  const flag = (key: string, variable: string) =>
    (scanned.flags.get(key) ?? 0) > 0 ||
    (env[variable] !== undefined && parseBoolean(variable, env[variable]));
  const rewrite = pick(scanned, env, "rewrite", "DENIT_REWRITE");
  const remap = pick(scanned, env, "remap-exit", "DENIT_REMAP_EXIT");
  const pdeath = pick(scanned, env, "pdeathsig", "DENIT_PDEATHSIG");
  const grace = lastOf(pick(scanned, env, "grace", "DENIT_GRACE").items);
  const killAfter = lastOf(pick(scanned, env, "kill-after", "DENIT_KILL_AFTER").items);
  const healthAddr = scanned.values.get("health-addr")?.at(-1) ?? env.DENIT_HEALTH_ADDR;
  const verbose = scanned.flags.get("verbose") ?? 0;
  const baseLevel = env.DENIT_LOG_LEVEL === undefined
    ? "warn"
    : wrap("DENIT_LOG_LEVEL", () => parseLogLevel(env.DENIT_LOG_LEVEL));
  const levelIndex = Math.min(LOG_LEVELS.indexOf(baseLevel) + verbose, LOG_LEVELS.length - 1);
  const health = healthAddr !== undefined && healthAddr !== ""
    ? wrap("--health-addr", () => parseListenAddress(healthAddr))
    : flag("health", "DENIT_HEALTH")
    ? DEFAULT_HEALTH
    : null;
  const pdeathText = lastOf(pdeath.items);
  return Object.freeze({
    command: Object.freeze([...scanned.command]),
    group: flag("group", "DENIT_GROUP"),
    rewrite: new Map(rewrite.items.map((item) => wrap(rewrite.from, () => parseRewrite(item)))),
    remapExit: new Set(remap.items.map((item) => wrap(remap.from, () => parseExitCode(item)))),
    subreaper: flag("subreaper", "DENIT_SUBREAPER"),
    pdeathsig: pdeathText === undefined ? null : wrap(pdeath.from, () => parseSignal(pdeathText)),
    graceMs: grace === undefined ? null : wrap("--grace", () => parseDuration(grace)),
    killAfterMs: killAfter === undefined
      ? DEFAULT_KILL_AFTER_MS
      : wrap("--kill-after", () => parseDuration(killAfter)),
    logLevel: LOG_LEVELS[levelIndex],
    health,
  });
}

/** Parses denit's arguments (without the program name) and environment. */
export function parseInvocation(
  args: readonly string[],
  env: Readonly<Record<string, string>>,
): Invocation {
  const scanned = scan(args);
  if (scanned.flags.has("help")) return { kind: "help" };
  if (scanned.flags.has("version")) return { kind: "version" };
  if (scanned.command.length === 0) throw new UsageError("No command given");
  return { kind: "run", config: buildConfig(scanned, env) };
}
