/**
 * denit: a tini-style PID 1 for containers. Runs one command, forwards signals to it, reaps
 * every zombie, stops what is left over, and exits with the child's status.
 *
 * The entry, started by denit's launcher (launch/denit.c): takes what the launcher handed
 * over, dispatches to a program, exits with its code. It is also the module of denit's one
 * worker thread, the spawner of `--user`.
 *
 * @module
 */

import { errorLine, orElse } from "./src/common/errors.ts";
import { ExitCode } from "./src/common/exit_codes.ts";
import type { Launch } from "./src/sys/launch.ts";

export { ExitCode };

/**
 * The job service's gRPC code (about 450 KB with @grpc/grpc-js), which nothing else may pay
 * for: a specifier the bundler cannot follow keeps it out of dist/denit.js, in a bundle of its
 * own beside it; from the sources it is the module.
 */
async function jobsModule(): Promise<typeof import("./src/jobs/entry.ts")> {
  await (await import("./src/jobs/require.ts")).provideRequire();
  const entry = import.meta.url.endsWith(".ts") ? "./src/jobs/entry.ts" : "./denit-jobs.js";
  return await loadHalf(entry, "the job service and `denit job`");
}

/** Imports a half of denit; rejects with one line that names its file and what it is for. */
async function loadHalf<T>(entry: string, what: string): Promise<T> {
  try {
    return await import(entry);
  } catch (err: unknown) {
    const reason = errorLine(err);
    const path = new URL(entry, import.meta.url).pathname;
    throw new Error(`cannot load ${path}, denit's code for ${what} (${reason})`);
  }
}

/**
 * The optional half (features.ts): copy mode and the health endpoint, which a plain run never
 * loads: denit-features.js beside the bundle (a specifier the bundler cannot follow), or the
 * module from the sources. Rejects with one line that names the file when it cannot be loaded.
 */
function features(): Promise<typeof import("./features.ts")> {
  const entry = import.meta.url.endsWith(".ts") ? "./features.ts" : "./denit-features.js";
  return loadHalf(entry, "copy mode and the health endpoint");
}

/** `denit init` and `copy`, from the optional half; null for any other. */
async function optionalProgram(args: readonly string[]): Promise<number | null> {
  const [name = ""] = args;
  if (!["init", "copy"].includes(name)) return null;
  let half: Awaited<ReturnType<typeof features>>;
  try {
    half = await features();
  } catch (err: unknown) {
    const { printErr } = await import("./src/common/log.ts");
    printErr(`denit: ${errorLine(err)}`);
    return ExitCode.INTERNAL;
  }
  return await (await half.copy()).copyMain(args);
}

/**
 * Runs denit: the arguments are the launcher's, byte for byte (the job service, which denit
 * starts on the runtime itself, takes the runtime's). Resolves to the exit code.
 */
export async function main(launch: Launch | null): Promise<number> {
  const decoder = new TextDecoder();
  const args = launch === null ? Deno.args : launch.args.map((arg) => decoder.decode(arg));
  const optional = await optionalProgram(args);
  if (optional !== null) return optional;
  if (args[0] === "job") {
    // A job's arguments and environment travel as gRPC strings, which are UTF-8: never replaced.
    const { printable, printErr } = await import("./src/common/log.ts");
    const strict = new TextDecoder("utf-8", { fatal: true });
    const refused = launch?.args.find((arg) => !orElse(() => strict.decode(arg) !== null, false));
    if (refused !== undefined) {
      const shown = printable(refused);
      printErr(`denit job: "${shown}" is not UTF-8, which a job's arguments and values must be`);
      return ExitCode.USAGE;
    }
    return await (await jobsModule()).jobMain(args.slice(1));
  }
  const { superviseMain } = await import("./src/supervise/main.ts");
  return await superviseMain(args, {
    launch,
    loadHealth: async () => (await (await features()).health()).startHealth,
  });
}

if ("WorkerGlobalScope" in globalThis) {
  await (await import("./src/supervise/spawner.ts")).serveSpawns();
} else if (import.meta.main) {
  const { readLaunch, takeBackStderr } = await import("./src/sys/launch.ts");
  const launch = readLaunch();
  if (launch !== null) takeBackStderr(launch);
  let code: number = ExitCode.INTERNAL;
  try {
    code = await main(launch);
  } catch (err: unknown) {
    // What nothing below caught (a half of denit missing, say): one line, exit 125.
    const { printErr } = await import("./src/common/log.ts");
    printErr(`denit: ${errorLine(err)}`);
  }
  Deno.exit(code);
}
