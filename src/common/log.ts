/** Logging: the only user of `console.*`. stderr only: stdout and stdin belong to the child. */

/** Levels, least to most verbose. */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;

/** A level name. */
export type LogLevel = typeof LOG_LEVELS[number];

/** Values of the key=value tail of a line. */
export type LogFields = Readonly<Record<string, string | number | boolean | undefined>>;

/** A logger bound to a level; lines look like `denit[1] warn: message key=value`. */
export interface Logger {
  readonly level: LogLevel;
  error(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  debug(message: string, fields?: LogFields): void;
  enabled(level: LogLevel): boolean;
}

function formatValue(value: string | number | boolean): string {
  const text = String(value);
  return /^[^\s"=]+$/.test(text) ? text : JSON.stringify(text);
}

/** Formats one line without writing it (exported for tests). */
export function formatLine(
  pid: number,
  level: LogLevel,
  message: string,
  fields: LogFields = {},
): string {
  const tail = Object.entries(fields)
    .filter((entry): entry is [string, string | number | boolean] => entry[1] !== undefined)
    .map(([key, value]) => ` ${key}=${formatValue(value)}`)
    .join("");
  return `denit[${pid}] ${level}: ${message}${tail}`;
}

/** Creates a logger that writes lines at or below `level` to stderr. */
export function createLogger(level: LogLevel, pid: number = Deno.pid): Logger {
  const rank = LOG_LEVELS.indexOf(level);
  const enabled = (wanted: LogLevel) => LOG_LEVELS.indexOf(wanted) <= rank;
  const write = (wanted: LogLevel) => (message: string, fields?: LogFields) => {
    if (!enabled(wanted)) return;
    // deno-lint-ignore no-console -- this module is the single owner of console output
    console.error(formatLine(pid, wanted, message, fields));
  };
  return Object.freeze({
    level,
    enabled,
    error: write("error"),
    warn: write("warn"),
    info: write("info"),
    debug: write("debug"),
  });
}

/** Writes text to stdout as is (help and version output, copy dry-run plans). */
export function printOut(text: string): void {
  // deno-lint-ignore no-console -- this module is the single owner of console output
  console.log(text);
}

/** Writes text to stderr as is (usage errors, before a logger exists). */
export function printErr(text: string): void {
  // deno-lint-ignore no-console -- this module is the single owner of console output
  console.error(text);
}
