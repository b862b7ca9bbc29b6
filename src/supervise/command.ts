/** The command found as execvp(3) finds it, with no shell, and messages naming what is missing. */

import { orElse } from "../common/errors.ts";
import { ExitCode } from "../common/exit_codes.ts";
import { canExecute, Errno, errnoMessage, pathExists } from "../sys/process.ts";

/** The command cannot be started: 126 or 127 as shells say, 125 when no process could be made. */
export class ExecError extends Error {
  override name = "ExecError";
  constructor(message: string, readonly exitCode: number) {
    super(message);
  }
}

/** execvp(3)'s search path when PATH is unset: glibc's confstr(_CS_PATH). */
export const DEFAULT_PATH = "/bin:/usr/bin";
/** The shell execvp(3) runs a script without `#!` with (glibc's _PATH_BSHELL). */
export const FALLBACK_SHELL = "/bin/sh";

/** What to execute: the file and its argv, as raw bytes. */
export interface Executable {
  readonly path: Uint8Array;
  readonly argv: readonly Uint8Array[];
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What a path names, following links as execve(2) does. */
function kindOf(path: string): "file" | "other" | "missing" {
  // Most PATH entries do not have the command: access(2) says so without an exception (the
  // first one Deno throws costs about half a millisecond).
  if (!pathExists(path)) return "missing";
  // Missing, a dangling link or an unreadable directory: not a candidate, as for execvp.
  const info = orElse(() => Deno.statSync(path), null);
  return info === null ? "missing" : info.isFile ? "file" : "other";
}

/**
 * A name with a slash as is, else the first executable in PATH (empty entry: the working
 * directory); a non-executable file found is the answer (126) if nothing better is.
 */
export function resolveCommand(name: string, pathVariable: string | undefined): Uint8Array {
  if (name === "") throw new ExecError(`Cannot start "": empty command name`, ExitCode.NOT_FOUND);
  if (name.includes("/")) {
    const kind = kindOf(name);
    if (kind === "missing") {
      throw new ExecError(`Cannot start "${name}": no such file`, ExitCode.NOT_FOUND);
    }
    if (kind === "other") {
      throw new ExecError(`Cannot start "${name}": not a regular file`, ExitCode.NOT_EXECUTABLE);
    }
    const access = canExecute(encoder.encode(name));
    if (!access.ok) {
      const detail = errnoMessage(access.errno).toLowerCase();
      throw new ExecError(`Cannot start "${name}": ${detail}`, ExitCode.NOT_EXECUTABLE);
    }
    return encoder.encode(name);
  }
  let denied: string | null = null;
  for (const dir of (pathVariable ?? DEFAULT_PATH).split(":")) {
    const candidate = dir === "" ? name : `${dir.replace(/\/+$/, "")}/${name}`;
    if (kindOf(candidate) !== "file") continue;
    if (canExecute(encoder.encode(candidate)).ok) return encoder.encode(candidate);
    denied ??= candidate;
  }
  if (denied !== null) {
    const why = `Cannot start "${name}": permission denied on "${denied}"`;
    throw new ExecError(why, ExitCode.NOT_EXECUTABLE);
  }
  throw new ExecError(`Cannot start "${name}": command not found`, ExitCode.NOT_FOUND);
}

function readHead(path: Uint8Array): Uint8Array {
  try {
    using file = Deno.openSync(decoder.decode(path), { read: true });
    const head = new Uint8Array(256);
    const n = file.readSync(head) ?? 0;
    return head.subarray(0, n);
  } catch {
    return new Uint8Array(0); // Unreadable: the exec error is all there is to report.
  }
}

/** The interpreter a `#!` line names (the kernel ends it at a blank or the line's end), or null. */
function interpreterOf(head: Uint8Array): string | null {
  if (head[0] !== 0x23 || head[1] !== 0x21) return null; // "#!"
  const line = decoder.decode(head.subarray(2)).split("\n")[0] ?? "";
  return line.replace(/^[ \t]+/, "").split(/[ \t]+/)[0] ?? null;
}

/** True for what a shell must not be asked to read: ELF files and anything with NUL bytes. */
function looksBinary(head: Uint8Array): boolean {
  return head.includes(0) || (head[0] === 0x7f && head[1] === 0x45 && head[2] === 0x4c);
}

/** After ENOEXEC, as execvp(3): the file run by /bin/sh; null if binary or there is no /bin/sh. */
export function shellFallback(command: Executable): Executable | null {
  if (looksBinary(readHead(command.path)) || kindOf(FALLBACK_SHELL) !== "file") return null;
  const shell = encoder.encode(FALLBACK_SHELL);
  return { path: shell, argv: [shell, command.path, ...command.argv.slice(1)] };
}

/** Maps a posix_spawn failure (the exec's errno) to an ExecError naming what is missing. */
export function execFailure(name: string, path: Uint8Array, errno: number): ExecError {
  if (errno === Errno.ENOENT) {
    // The file was found: what is missing is its #! interpreter or its ELF loader.
    const interpreter = interpreterOf(readHead(path));
    const what = interpreter === null
      ? "its dynamic loader (ELF interpreter) is missing"
      : interpreter.endsWith("\r")
      ? `its #! line ends with a carriage return (Windows line ends, CRLF): the kernel looks ` +
        `for "${interpreter.slice(0, -1)}\\r"; convert the file to LF line ends`
      : `its interpreter "${interpreter}" is missing`;
    return new ExecError(`Cannot start "${name}": ${what}`, ExitCode.NOT_FOUND);
  }
  if (errno === Errno.EAGAIN) {
    // clone(2) refused: the cgroup's pids.max, or RLIMIT_NPROC of a non-root user.
    return new ExecError(
      `Cannot start "${name}": no new process allowed (resource temporarily unavailable): ` +
        `the limit on processes is reached (the cgroup's pids.max, or RLIMIT_NPROC)`,
      ExitCode.INTERNAL,
    );
  }
  if (errno === Errno.ENOEXEC) {
    const script = !looksBinary(readHead(path)) && kindOf(FALLBACK_SHELL) !== "file";
    const detail = script
      ? `exec format error (no #! line, and no ${FALLBACK_SHELL} to run it)`
      : "exec format error";
    return new ExecError(`Cannot start "${name}": ${detail}`, ExitCode.NOT_EXECUTABLE);
  }
  const detail = errnoMessage(errno).toLowerCase();
  return new ExecError(`Cannot start "${name}": ${detail}`, ExitCode.NOT_EXECUTABLE);
}
