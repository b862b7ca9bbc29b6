/**
 * What the launcher (launch/denit.c) hands over in DENIT_LAUNCH's memfd: the arguments as
 * bytes, the variables moved out of the runtime's way; the environment is put back.
 */

import { closeFd, cString, libc } from "./symbols.ts";

const LAUNCH_VARIABLE = "DENIT_LAUNCH";

/** signal.h's SIGTERM (common/signals.ts has it too, but sys/ may not import common/). */
const SIGTERM = 15;

/** DENIT_LAUNCH's parts; null if it is not the launcher's. */
function parseLaunchVariable(value: string | undefined) {
  const match = /^(\d+):(\d+):(-1|\d+):(-1|\d+)$/.exec(value ?? "");
  if (match === null) return null;
  const stderr = Number(match[3]);
  const copier = Number(match[4]);
  return {
    memfd: Number(match[1]),
    /** The open-file soft limit the container set (the runtime raised its own). */
    fileSoftLimit: Number(match[2]),
    /** Where the real stderr waits while the runtime's is a pipe (on a terminal); else null. */
    stderr: stderr < 0 ? null : stderr,
    /** The launcher's process that copies that pipe to the terminal; null with no pipe. */
    copier: copier <= 0 ? null : copier,
  };
}

/** The memfd's entries: the count of arguments, the arguments, moved entries, "", added names. */
function parseLaunch(
  bytes: Uint8Array,
  variable: NonNullable<ReturnType<typeof parseLaunchVariable>>,
) {
  const entries: Uint8Array[] = [];
  for (let start = 0; start < bytes.length;) {
    const end = bytes.indexOf(0, start);
    entries.push(bytes.subarray(start, end < 0 ? bytes.length : end));
    start = (end < 0 ? bytes.length : end) + 1;
  }
  const decoder = new TextDecoder();
  const count = Number(decoder.decode(entries[0] ?? new Uint8Array()));
  const rest = entries.slice(1 + count);
  const blank = rest.findIndex((entry) => entry.length === 0);
  const { memfd: _closed, ...handed } = variable; // the memfd is closed once read
  return {
    /** denit's arguments, byte for byte (the runtime's Deno.args replaced what is not UTF-8). */
    args: entries.slice(1, 1 + count),
    /** "NAME=VALUE" entries moved out of the runtime's way, to go back into the environment. */
    moved: blank < 0 ? rest : rest.slice(0, blank),
    /** Variables the launcher set for the runtime, to be removed again. */
    added: blank < 0 ? [] : rest.slice(blank + 1).map((entry) => decoder.decode(entry)),
    ...handed,
  };
}

/** What the launcher handed over; `restored`, the names put back into the environment. */
export type Launch = Readonly<ReturnType<typeof parseLaunch> & { restored: readonly string[] }>;

/** What the launcher handed over, the container's environment put back; null without it. */
export function readLaunch(): Launch | null {
  const variable = parseLaunchVariable(Deno.env.get(LAUNCH_VARIABLE));
  if (variable === null) return null;
  let launch: ReturnType<typeof parseLaunch>;
  try {
    launch = parseLaunch(Deno.readFileSync(`/proc/self/fd/${variable.memfd}`), variable);
  } catch {
    return null; // not the launcher's memfd after all
  } finally {
    closeFd(variable.memfd);
  }
  return { ...launch, restored: restoreEnvironment(launch) };
}

/** The launcher's variables go, the moved ones come back byte for byte; the names put back. */
function restoreEnvironment(launch: ReturnType<typeof parseLaunch>): string[] {
  for (const name of launch.added) Deno.env.delete(name);
  const restored: string[] = [];
  for (const entry of launch.moved) {
    const equals = entry.indexOf(0x3d); // "="
    if (equals <= 0) continue;
    libc.setenv(cString(entry.subarray(0, equals)), cString(entry.subarray(equals + 1)), 1);
    restored.push(new TextDecoder().decode(entry.subarray(0, equals)));
  }
  return restored;
}

/** On a terminal: the real stderr back from the launcher's pipe; its copier ends and is reaped. */
export function takeBackStderr(launch: Launch): void {
  if (launch.stderr === null) return;
  libc.dup2(launch.stderr, 2);
  closeFd(launch.stderr);
  if (launch.copier === null) return;
  libc.kill(launch.copier, SIGTERM);
  libc.waitpid(launch.copier, new Int32Array(1), 0);
}
