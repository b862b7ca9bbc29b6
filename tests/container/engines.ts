/**
 * Docker and Podman for the container tests: whether an engine runs here (and if not, why),
 * the images the tests need, built locally from `make rootfs` with no registry, and a way to
 * run and clean up containers. Every container is started with --network none or host
 * (loopback only) and removed, by name, when its test ends.
 */

import { buildGlibcRootfs } from "../../fixtures/rootfs.ts";
import { DENO, FIXTURES, ROOT, run, staticFixture } from "../helpers.ts";

/** The engines the suite drives. */
export type Engine = "docker" | "podman";

/** The rootfs form's image (`make image`) and the images built on it for the tests. */
export const IMAGE = "denit";
/** denit plus the test children: fixtures, /app/server and /hog. */
export const TEST_IMAGE = "denit-test";
/** The C library and /app/server only: no shell, no Deno, no denit (an "ordinary image"). */
export const GLIBC_IMAGE = "denit-glibc";

/** Why `engine` cannot run containers here; null when it can. */
export async function engineProblem(engine: Engine): Promise<string | null> {
  if (Deno.uid() !== 0) return `${engine} tests need root`;
  try {
    const info = await run([engine, "info"], { timeoutMs: 30_000 });
    if (info.code === 0) return null;
    const why = info.stderr.trim().split("\n").at(-1) ?? "";
    return `${engine} cannot run containers here (${engine} info: ${why}); .ci/run starts dockerd`;
  } catch {
    return `${engine} is not installed (.ci/run installs docker.io and podman)`;
  }
}

/** Runs an engine command (bounded); the result as text. */
export async function engine(
  name: Engine,
  args: readonly string[],
  options: { timeoutMs?: number; stdin?: Uint8Array } = {},
): ReturnType<typeof run> {
  return await run([name, ...args], {
    timeoutMs: options.timeoutMs ?? 60_000,
    ...(options.stdin === undefined ? {} : { stdin: options.stdin }),
  });
}

/** Runs an engine command that must succeed; its stdout. */
export async function must(name: Engine, args: readonly string[]): Promise<string> {
  const result = await engine(name, args, { timeoutMs: 120_000 });
  if (result.code !== 0) {
    throw new Error(`${name} ${args.join(" ")}: exit ${result.code}: ${result.stderr.trim()}`);
  }
  return result.stdout;
}

async function staticBinary(source: string, out: string): Promise<void> {
  const built = await run(["gcc", "-O2", "-static", "-o", out, `${FIXTURES}/${source}`]);
  if (built.code !== 0) throw new Error(`gcc ${source}: ${built.stderr}`);
}

const built = new Map<Engine, Promise<void>>();

/** Builds the three images once per engine and test run (from dist/rootfs: make rootfs). */
export function images(name: Engine): Promise<void> {
  let promise = built.get(name);
  if (promise === undefined) {
    promise = buildImages(name);
    built.set(name, promise);
  }
  return promise;
}

async function buildImages(name: Engine): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "denit-images-" });
  try {
    await must(name, [
      "build",
      "-q",
      "-t",
      IMAGE,
      "-f",
      `${ROOT}launch/rootfs.Dockerfile`,
      `${ROOT}dist/rootfs`,
    ]);
    await Deno.mkdir(`${dir}/test/fixtures`, { recursive: true });
    await Deno.copyFile(
      `${FIXTURES}/container_child.ts`,
      `${dir}/test/fixtures/container_child.ts`,
    );
    await Deno.copyFile(staticFixture("signal_echo"), `${dir}/test/fixtures/signal_echo`);
    await staticBinary("server.c", `${dir}/test/server`);
    await staticBinary("hog.c", `${dir}/test/hog`);
    await staticBinary("steps_serve.c", `${dir}/test/steps`);
    await Deno.writeTextFile(
      `${dir}/test/Dockerfile`,
      `FROM ${IMAGE}\nCOPY fixtures/ /fixtures/\nCOPY server /app/server\nCOPY hog /hog\n` +
        "COPY steps /steps\n",
    );
    await must(name, ["build", "-q", "-t", TEST_IMAGE, `${dir}/test`]);
    buildGlibcRootfs(`${dir}/glibc`, DENO);
    await Deno.mkdir(`${dir}/glibc/app`);
    await Deno.copyFile(`${dir}/test/server`, `${dir}/glibc/app/server`);
    await Deno.chmod(`${dir}/glibc/app/server`, 0o755);
    await Deno.writeTextFile(`${dir}/glibc.Dockerfile`, "FROM scratch\nCOPY . /\n");
    await must(name, [
      "build",
      "-q",
      "-t",
      GLIBC_IMAGE,
      "-f",
      `${dir}/glibc.Dockerfile`,
      `${dir}/glibc`,
    ]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The test child in the image (run by the image's own Deno). */
export const CHILD = [
  "/deno",
  "run",
  "--quiet",
  "--no-config",
  "-A",
  "/fixtures/container_child.ts",
];
/** The signal echo in the image: "ready PID PGID", then a line per signal. */
export const ECHO = ["/fixtures/signal_echo"];

let counter = 0;

/** A unique container name for this test run. */
export function containerName(what: string): string {
  return `denit-test-${what}-${Deno.pid}-${++counter}`;
}

/** Removes containers by name (a test's `finally`). */
export async function remove(name: Engine, containers: readonly string[]): Promise<void> {
  if (containers.length > 0) await engine(name, ["rm", "-f", ...containers]);
}

/** Polls a container's logs until `pattern` shows (bounded); the logs. */
export async function logsMatch(
  name: Engine,
  container: string,
  pattern: RegExp,
  timeoutMs = 20_000,
): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const logs = await engine(name, ["logs", container]);
    const text = logs.stdout + logs.stderr;
    if (pattern.test(text)) return text;
    if (Date.now() > deadline) throw new Error(`${container}: no ${pattern} in its logs: ${text}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The exit code of a stopped container, and whether the engine saw an OOM kill. */
export async function exitState(
  name: Engine,
  container: string,
): Promise<{ code: number; oomKilled: boolean }> {
  const text = await must(name, [
    "inspect",
    "-f",
    "{{.State.ExitCode}} {{.State.OOMKilled}}",
    container,
  ]);
  const [code = "", oom = ""] = text.trim().split(" ");
  return { code: Number(code), oomKilled: oom === "true" };
}
