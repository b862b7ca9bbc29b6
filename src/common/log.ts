/** Logging: the only user of `console.*`. stderr only: stdout and stdin belong to the child. */

import { quietDelay } from "./delay.ts";
import { orElse } from "./errors.ts";

/** Levels, least to most verbose. */
export const LOG_LEVELS = ["error", "warn", "info", "debug"] as const;

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
  /** Resolves once every line is written, or after EXIT_FLUSH_MS (stderr may stay full). */
  flush(): Promise<void>;
}

const ESCAPES: Record<string, string> = { "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t" };
const hex = (code: number) => `\\x${code.toString(16).padStart(2, "0")}`;

/** Control characters as visible escapes (\n, \x1b), backslashes doubled: a line stays one. */
export function escapeControls(text: string): string {
  // deno-lint-ignore no-control-regex -- finding control characters is the point
  return text.replace(/[\\\u0000-\u001f\u007f-\u009f]/g, (c) => ESCAPES[c] ?? hex(c.charCodeAt(0)));
}

/** Control characters as \xNN: a name or an argument never breaks a line of output. */
export function visible(text: string): string {
  // deno-lint-ignore no-control-regex -- finding control characters is the point
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => hex(c.charCodeAt(0)));
}

/** Bytes for messages: their text if they are UTF-8, else each byte, unprintable ones as \xNN. */
export function printable(bytes: Uint8Array): string {
  return orElse(() => new TextDecoder("utf-8", { fatal: true }).decode(bytes), null) ??
    [...bytes].map((b) => b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : hex(b)).join("");
}

function formatValue(value: string | number | boolean): string {
  const text = String(value);
  // deno-lint-ignore no-control-regex -- a value with control characters is quoted, escaped
  return /^[^\s"=\u0000-\u001f\u007f]+$/.test(text) ? text : JSON.stringify(text);
}

/** How lines look: `denit[PID] level: message key=value`, or one JSON object per line. */
export type LogFormat = "text" | "json";

/** A line's text for a level, a message and its fields. */
export type LineFormat = (level: LogLevel, message: string, fields?: LogFields) => string;

/** The lines of `program` (PID `pid`) in `format`; JSON: time, level, logger, pid, message, fields. */
export function lineFormat(format: LogFormat, pid: number, program = "denit"): LineFormat {
  return (level, message, fields = {}) => {
    const kept = Object.entries(fields)
      .filter((entry): entry is [string, string | number | boolean] => entry[1] !== undefined);
    if (format === "json") {
      const time = new Date().toISOString();
      const all = Object.fromEntries(kept);
      return JSON.stringify({ time, level, logger: program, pid, message, fields: all });
    }
    const tail = kept.map(([key, value]) => ` ${key}=${formatValue(value)}`).join("");
    return `${program}[${pid}] ${level}: ${escapeControls(message)}${tail}`;
  };
}

/** PIPE_BUF: a line goes out in one write(2), never interleaved with the child's on a pipe. */
export const MAX_LINE_BYTES = 4096;

const encoder = new TextEncoder();

/** The line's bytes with "\n", at most MAX_LINE_BYTES: the message is cut when it must be. */
export function lineBytes(format: (message: string) => string, message: string): Uint8Array {
  let bytes = encoder.encode(`${format(message)}\n`);
  for (let keep = message.length; bytes.length > MAX_LINE_BYTES && keep > 0;) {
    // Cut by the excess (at least a little), then format again: JSON escapes must stay whole.
    keep = Math.max(0, keep - Math.max(16, bytes.length - MAX_LINE_BYTES));
    bytes = encoder.encode(`${format(`${message.slice(0, keep)}...`)}\n`);
  }
  return bytes;
}

/** How long an exit waits for lines stderr has not taken yet. */
export const EXIT_FLUSH_MS = 1000;

/** Bytes of lines held while stderr is full; beyond them a line is dropped, and counted. */
const MAX_HELD_BYTES = 64 * 1024;

/**
 * Lines to stderr, one write(2) each, on a runtime thread: a full pipe never holds up the caller;
 * beyond MAX_HELD_BYTES, lines are dropped and counted.
 */
class ErrWriter {
  readonly #dropped: (count: number) => Uint8Array;
  readonly #held: Uint8Array[] = [];
  #heldBytes = 0;
  #droppedLines = 0;
  #writing: Promise<void> | null = null;

  constructor(dropped: (count: number) => Uint8Array) {
    this.#dropped = dropped;
  }

  write(bytes: Uint8Array): void {
    if (this.#heldBytes + bytes.length > MAX_HELD_BYTES) {
      this.#droppedLines++;
      return;
    }
    this.#held.push(bytes);
    this.#heldBytes += bytes.length;
    this.#writing ??= this.#drain();
  }

  async #drain(): Promise<void> {
    for (let bytes = this.#held.shift(); bytes !== undefined; bytes = this.#held.shift()) {
      try {
        for (let done = 0; done < bytes.length;) {
          done += await Deno.stderr.write(bytes.subarray(done));
        }
      } catch {
        // stderr closed (EPIPE): the line is lost, not denit.
      }
      this.#heldBytes -= bytes.length;
      if (this.#held.length === 0 && this.#droppedLines > 0) {
        const note = this.#dropped(this.#droppedLines);
        this.#droppedLines = 0;
        this.#held.push(note);
        this.#heldBytes += note.length;
      }
    }
    this.#writing = null;
  }

  async flush(): Promise<void> {
    if (this.#writing === null) return;
    await Promise.race([this.#writing, quietDelay(EXIT_FLUSH_MS)]);
  }
}

/** Creates a logger that writes lines at or below `level` to stderr. */
export function createLogger(
  level: LogLevel,
  pid: number = Deno.pid,
  format: LogFormat = "text",
  program = "denit",
): Logger {
  const rank = LOG_LEVELS.indexOf(level);
  const enabled = (wanted: LogLevel) => LOG_LEVELS.indexOf(wanted) <= rank;
  const shape = lineFormat(format, pid, program);
  const line = (wanted: LogLevel, message: string, fields?: LogFields) =>
    lineBytes((text) => shape(wanted, text, fields), message);
  const writer = new ErrWriter((count) =>
    line("warn", `${count} log lines were dropped while stderr was full`, { dropped: count })
  );
  const write = (wanted: LogLevel) => (message: string, fields?: LogFields) => {
    if (enabled(wanted)) writer.write(line(wanted, message, fields));
  };
  return Object.freeze({
    level,
    enabled,
    error: write("error"),
    warn: write("warn"),
    info: write("info"),
    debug: write("debug"),
    flush: () => writer.flush(),
  });
}

/** Writes text to stdout as is (help and version output, copy dry-run plans). */
export function printOut(text: string): void {
  // deno-lint-ignore no-console -- this module is the single owner of console output
  console.log(text);
}

/** How a program's usage errors look: `prefix: message`, its usage line, `command --help`. */
export interface Usage {
  readonly prefix: string;
  readonly line: string;
  readonly command: string;
}

/** A usage error as GNU tools print it, the message on one line (control characters escaped). */
export function printUsageError(message: string, usage: Usage): void {
  const { prefix, line, command } = usage;
  const hint = `Try '${command} --help' for more information.`;
  printErr(`${prefix}: ${escapeControls(message)}\n${line}\n${hint}`);
}

/** Writes text to stderr as is (usage errors, before a logger exists). */
export function printErr(text: string): void {
  // deno-lint-ignore no-console -- this module is the single owner of console output
  console.error(text);
}
