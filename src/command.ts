/** Finding the command on PATH (no shell involved) and recovering its arguments as raw bytes. */

import { ExitCode } from "./exit_codes.ts";
import { canExecute, Errno, errnoMessage } from "./libc.ts";

/** The command cannot be started; `exitCode` is 126 or 127 as in the shell convention. */
export class ExecError extends Error {
  override name = "ExecError";
  constructor(message: string, readonly exitCode: number) {
    super(message);
  }
}

// execvp(3)'s default when PATH is unset, as in glibc's confstr(_CS_PATH).
const DEFAULT_PATH = "/bin:/usr/bin";

const encoder = new TextEncoder();

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    // Missing, a dangling link or an unreadable directory: not a candidate, as for execvp.
    return false;
  }
}

/**
 * Resolves a command the way execvp(3) does: a name with a slash is used as is, anything else
 * is looked up in each PATH entry (an empty entry is the working directory). A file that exists
 * but is not executable is remembered, and reported as 126 if nothing better is found.
 */
export function resolveCommand(name: string, pathVariable: string | undefined): Uint8Array {
  if (name === "") throw new ExecError(`Cannot start "": empty command name`, ExitCode.NOT_FOUND);
  if (name.includes("/")) {
    if (!isFile(name)) {
      const exists = (() => {
        try {
          Deno.statSync(name);
          return true;
        } catch {
          return false; // Not there at all: reported as "not found" below.
        }
      })();
      if (exists) {
        throw new ExecError(`Cannot start "${name}": not a regular file`, ExitCode.NOT_EXECUTABLE);
      }
      throw new ExecError(`Cannot start "${name}": no such file`, ExitCode.NOT_FOUND);
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
    if (!isFile(candidate)) continue;
    if (canExecute(encoder.encode(candidate)).ok) return encoder.encode(candidate);
    denied ??= candidate;
  }
  if (denied !== null) {
    throw new ExecError(
      `Cannot start "${name}": permission denied on "${denied}"`,
      ExitCode.NOT_EXECUTABLE,
    );
  }
  throw new ExecError(`Cannot start "${name}": command not found`, ExitCode.NOT_FOUND);
}

/** Maps a posix_spawn failure (the exec's errno) to an ExecError. */
export function execFailure(name: string, errno: number): ExecError {
  const detail = errnoMessage(errno).toLowerCase();
  // ENOENT after a successful lookup means a missing interpreter (#!) or loader.
  const code = errno === Errno.ENOENT ? ExitCode.NOT_FOUND : ExitCode.NOT_EXECUTABLE;
  return new ExecError(`Cannot start "${name}": ${detail}`, code);
}
